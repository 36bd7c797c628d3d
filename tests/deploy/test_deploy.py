#!/usr/bin/env python3
"""Checks of the deployment files in deploy/ (docs/deploy.md).

    test_deploy.py --root REPO --dtrain BUILD/dtrain [--sanitized]

No container runtime or cluster is used: the Dockerfile is parsed and held against this machine
(its apt packages must exist in Debian 12's archive, its runtime packages must provide every
library the dtrain binary loads, its COPY sources must exist and survive the ignore file), the
Kubernetes manifests are parsed and held against the Dockerfile (image, user, installed paths),
against each other (volumes, claims, config maps, secrets, services) and against dtrain itself
(every config key against `dtrain train --help-config`, the whole config through `dtrain plan`,
every `dtrain launch` option against its --help, memory limits against the plan), and the shell
scripts run for real with stand-ins for sshd, ssh, srun, squeue and scontrol: the pod entrypoint
must pass SIGTERM to the training processes and wait for them, and the sbatch script must requeue
exactly when the workers checkpointed for the time limit.

Each check prints "ok", "FAIL: why" or "SKIP: why"; the last line counts them.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import lru_cache

import yaml

ARGS = None
CHECKS = []

# Packages of scripts/install-deps.sh that only the tests, the demo or the developer need (the
# reference PyTorch, datasets, the Prometheus and Chromium that tests/serve drives, git, and clang
# with its OpenMP for the libFuzzer targets of tests/fuzz); every other one must be in the
# Dockerfile's build stage.
TEST_ONLY_PACKAGES = {"python3", "python3-venv", "python3-numpy", "python3-torch",
                      "python3-torchvision", "dataset-fashion-mnist", "fortunes", "git",
                      "prometheus", "chromium", "clang", "libomp-dev",
                      "slurmd", "slurmctld", "slurm-client", "munge"}
# In every Debian image (dpkg itself depends on it), so the runtime stage need not list it.
BASE_IMAGE_PACKAGES = {"libc6"}

API_VERSIONS = {"ConfigMap": "v1", "PersistentVolumeClaim": "v1", "Service": "v1",
                "Secret": "v1", "Job": "batch/v1", "MPIJob": "kubeflow.org/v2beta1"}
MPIJOB_SPEC_KEYS = {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath",
                    "mpiImplementation", "launcherCreationPolicy", "runLauncherAsWorker"}
RUN_POLICY_KEYS = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                   "backoffLimit", "schedulingPolicy", "suspend", "managedBy"}
# dtrain launch options that take a value (the others are flags)
LAUNCH_VALUE_OPTS = {"-n", "--workers", "--hosts", "--hostfile", "--threads-per-worker",
                     "--max-failures", "--mpirun", "--mpirun-args", "--backoff", "--monitor-port",
                     "--monitor-addr", "--monitor-token"}
MIN_GRACE_S = 120  # a step plus a checkpoint after SIGTERM


class Skip(Exception):
    pass


def check(fn):
    CHECKS.append(fn)
    return fn


def path(*p):
    return os.path.join(ARGS.root, *p)


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, **kw)


# ---- parsing ------------------------------------------------------------------------------------

def parse_dockerfile(fname):
    """[{'name', 'base', 'instrs': [(INSTR, text)]}] per stage, continuations joined."""
    instrs, cur = [], None
    for line in open(fname):
        s = line.strip()
        if cur is None and (not s or s.startswith("#")):
            continue
        if cur is not None and (not s or s.startswith("#")):
            continue  # comment or empty line inside a continuation (Docker drops them)
        if s.endswith("\\"):
            cur = (cur or "") + s[:-1] + " "
            continue
        text = (cur or "") + s
        cur = None
        word, _, rest = text.partition(" ")
        instrs.append((word.upper(), rest.strip()))
    stages = []
    for word, rest in instrs:
        if word == "FROM":
            toks = rest.split()
            toks = [t for t in toks if not t.startswith("--")]
            name = toks[2] if len(toks) >= 3 and toks[1].lower() == "as" else None
            stages.append({"name": name, "base": toks[0], "instrs": []})
        elif stages:
            stages[-1]["instrs"].append((word, rest))
    return stages


def apt_packages(stage):
    pkgs = []
    for word, rest in stage["instrs"]:
        if word != "RUN":
            continue
        for seg in re.split(r"&&|;|\|\|", rest):
            toks = seg.split()
            for i in range(len(toks) - 1):
                if toks[i] in ("apt-get", "apt") and toks[i + 1] == "install":
                    pkgs += [t for t in toks[i + 2:] if not t.startswith("-")]
    return pkgs


def copies(stage):
    """[(from_stage or None, [sources], dest)] of COPY/ADD."""
    out = []
    for word, rest in stage["instrs"]:
        if word not in ("COPY", "ADD"):
            continue
        toks = shlex.split(rest)
        frm = None
        while toks and toks[0].startswith("--"):
            if toks[0].startswith("--from="):
                frm = toks[0][7:]
            toks.pop(0)
        out.append((frm, toks[:-1], toks[-1]))
    return out


def installed_paths(stage):
    """Absolute paths that the stage's COPY instructions create."""
    paths = set()
    for _, srcs, dest in copies(stage):
        if dest.endswith("/") or len(srcs) > 1:
            paths.update(dest.rstrip("/") + "/" + os.path.basename(s.rstrip("/")) for s in srcs)
        else:
            paths.add(dest)
    return paths


@lru_cache(maxsize=None)
def dockerfile():
    stages = parse_dockerfile(path("deploy", "Dockerfile"))
    assert len(stages) >= 2, f"deploy/Dockerfile has {len(stages)} stage(s); expected a build " \
                             "and a runtime stage"
    return stages


def final_stage():
    return dockerfile()[-1]


def instr(stage, word):
    return [rest for w, rest in stage["instrs"] if w == word]


def labels(stage):
    out = {}
    for rest in instr(stage, "LABEL"):
        for tok in shlex.split(rest):
            k, _, v = tok.partition("=")
            out[k] = v
    return out


def image_user():
    """(uid, user name, home) of the final stage."""
    st = final_stage()
    users = instr(st, "USER")
    assert users, "the runtime stage has no USER: it would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"USER {users[-1]}: not numeric, so Kubernetes' runAsNonRoot " \
                          "cannot verify it"
    uid = int(uid)
    name = None
    for rest in instr(st, "RUN"):
        m = re.search(r"useradd\s+(.*?)(?:&&|;|$)", rest)
        if m:
            toks = m.group(1).split()
            if "--uid" in toks and toks[toks.index("--uid") + 1] == str(uid):
                name = toks[-1]
    assert name, f"no `useradd --uid {uid} ... NAME` in the runtime stage"
    return uid, name, f"/home/{name}"


def cmake_version():
    m = re.search(r"project\(\s*\w+\s+VERSION\s+([0-9.]+)", open(path("CMakeLists.txt")).read())
    assert m, "no project(... VERSION x.y.z) in CMakeLists.txt"
    return m.group(1)


def image_name():
    lab = labels(final_stage())
    title = lab.get("org.opencontainers.image.title")
    version = lab.get("org.opencontainers.image.version")
    assert title and version, "the runtime stage needs LABELs org.opencontainers.image.title " \
                              "and .version (the image tag)"
    return f"{title}:{version}"


@lru_cache(maxsize=None)
def manifests():
    """[(file, document)] of deploy/k8s/*.yaml, parsed once (checks compare them by identity)."""
    docs = []
    for f in sorted(glob.glob(path("deploy", "k8s", "*.yaml"))):
        for d in yaml.safe_load_all(open(f)):
            if d is not None:
                docs.append((os.path.relpath(f, ARGS.root), d))
    assert docs, "no manifests in deploy/k8s"
    return docs


def by_kind(kind):
    return [(f, d) for f, d in manifests() if d.get("kind") == kind]


def pod_templates():
    """[(label, workload label, pod template)] of every MPIJob replica and Job."""
    out = []
    for f, d in manifests():
        if d["kind"] == "MPIJob":
            for role, rs in d["spec"]["mpiReplicaSpecs"].items():
                out.append((f"{f} {d['metadata']['name']} {role}", f"{f}:{d['metadata']['name']}",
                            rs["template"]))
        elif d["kind"] == "Job":
            out.append((f"{f} {d['metadata']['name']}", f"{f}:{d['metadata']['name']}",
                        d["spec"]["template"]))
    assert out, "no pod templates in deploy/k8s"
    return out


def cpu(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def mem(q):
    q = str(q)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9,
             "T": 1e12}
    for u in sorted(units, key=len, reverse=True):
        if q.endswith(u):
            return float(q[:-len(u)]) * units[u]
    return float(q)


def help_config_keys():
    r = run([ARGS.dtrain, "train", "--help-config"])
    assert r.returncode == 0, f"dtrain train --help-config failed: {r.stderr}"
    keys = set(re.findall(r"^\s+([a-z_]+\.[a-z_0-9]+)\s", r.stdout, re.M))
    assert len(keys) > 20 and "ckpt.dir" in keys, \
        f"could not read the keys of `dtrain train --help-config` ({len(keys)} found)"
    return keys


def flatten(cfg, prefix=""):
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def launch_commands():
    """[(label, workload, template, container, launch argv after `launch`)]."""
    out = []
    for label, wl, tpl in pod_templates():
        for c in tpl["spec"]["containers"]:
            argv = list(c.get("command", [])) + list(c.get("args", []))
            for i in range(len(argv) - 1):
                if os.path.basename(argv[i]) == "dtrain" and argv[i + 1] == "launch":
                    out.append((label, wl, tpl, c, argv[i + 2:]))
    assert out, "no `dtrain launch` command in deploy/k8s"
    return out


def split_launch(argv):
    """(options dict, config path, overrides) of a dtrain launch argv."""
    opts, i = {}, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in LAUNCH_VALUE_OPTS:
            assert i + 1 < len(argv), f"launch option {argv[i]} without a value"
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            opts[argv[i]] = True
            i += 1
    assert i < len(argv), "dtrain launch without a CONFIG"
    return opts, argv[i], argv[i + 1:]


def mounts(tpl, container):
    """{mountPath: volume} of a container."""
    vols = {v["name"]: v for v in tpl["spec"].get("volumes", [])}
    return {m["mountPath"]: vols.get(m["name"]) for m in container.get("volumeMounts", [])}


def volume_for(tpl, container, p):
    """The volume whose mount holds path p (longest mount path), or None."""
    best = None
    for mp, vol in mounts(tpl, container).items():
        if p == mp or p.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best[0]):
                best = (mp, vol)
    return best


def configmap_file(tpl, container, p):
    """The text of file p from a configMap mount of the container, or an assertion."""
    hit = volume_for(tpl, container, p)
    assert hit and hit[1] and "configMap" in hit[1], f"{p} is not on a configMap volume"
    name = hit[1]["configMap"]["name"]
    key = os.path.relpath(p, hit[0])
    cms = {d["metadata"]["name"]: d for _, d in by_kind("ConfigMap")}
    assert name in cms, f"configMap {name} is not defined in deploy/k8s"
    assert key in cms[name].get("data", {}), f"configMap {name} has no key {key} (for {p})"
    return cms[name]["data"][key]


def templates_of(workload):
    return [(label, tpl) for label, wl, tpl in pod_templates() if wl == workload]


def main_container(tpl):
    return tpl["spec"]["containers"][0]


def docs_text():
    f = path("docs", "deploy.md")
    assert os.path.exists(f), "docs/deploy.md is missing"
    return open(f).read()


# ---- Dockerfile ---------------------------------------------------------------------------------

@check
def dockerfile_stages():
    stages = dockerfile()
    for st in stages:
        img, _, tag = st["base"].partition(":")
        assert img == "debian" and re.match(r"(12|bookworm)([-.].*)?$", tag), \
            f"FROM {st['base']}: expected a pinned Debian 12 image (debian:12..., " \
            "debian:bookworm...)"
    assert "slim" in stages[-1]["base"], f"runtime stage FROM {stages[-1]['base']}: not -slim"
    names = {st["name"] for st in stages[:-1]}
    froms = {frm for frm, _, _ in copies(stages[-1]) if frm}
    assert froms and froms <= names, f"the runtime stage copies from {froms or 'no stage'}, " \
                                     f"not from the build stage(s) {names}"
    for word in ("cmake", "gcc", "g++", "build-essential"):
        assert word not in apt_packages(stages[-1]), f"the runtime stage installs {word}"


@check
def dockerfile_user():
    uid, name, home = image_user()
    assert uid != 0, "USER 0 is root"
    workdir = instr(final_stage(), "WORKDIR")
    assert workdir and workdir[-1] == home, f"WORKDIR {workdir} is not the user's home {home}"


@check
def dockerfile_apt_packages_exist():
    lists = glob.glob("/var/lib/apt/lists/*Packages*")
    if not lists:
        raise Skip("no apt package lists on this machine (apt-get update)")
    wanted = {p: st["name"] or st["base"] for st in dockerfile() for p in apt_packages(st)}
    assert len(wanted) > 10, f"read only {sorted(wanted)} from the Dockerfile's apt-get installs"
    # one call: apt-cache prints the packages it has (a purely virtual or unknown name fails)
    r = run(["apt-cache", "show", "--no-all-versions", *sorted(wanted)])
    found = set(re.findall(r"^Package: (\S+)$", r.stdout, re.M))
    missing = [f"{p} ({stage})" for p, stage in sorted(wanted.items()) if p not in found]
    assert not missing, f"not in this machine's Debian 12 archive: {', '.join(missing)}"


@check
def dockerfile_build_deps():
    r = run(["bash", path("scripts", "install-deps.sh"), "--list-test"])
    assert r.returncode == 0, f"scripts/install-deps.sh --list-test: {r.stderr.strip()}"
    deps = set(r.stdout.split())
    assert len(deps) > 10, f"read only {deps} from scripts/install-deps.sh"
    build = set(apt_packages(dockerfile()[0]))
    missing = sorted(deps - TEST_ONLY_PACKAGES - build)
    assert not missing, f"scripts/install-deps.sh installs {missing}, the Dockerfile's build " \
                        "stage does not (or add them to TEST_ONLY_PACKAGES here)"


def owning_package(lib_path):
    real = os.path.realpath(lib_path)
    for cand in (real, re.sub(r"^/usr/lib/", "/lib/", real), lib_path):
        r = run(["dpkg-query", "-S", cand])
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


@check
def dockerfile_runtime_libraries():
    if ARGS.sanitized:
        # the image builds a Release binary; an instrumented build links sanitizer runtimes and
        # may have been configured differently (the main pass checks the Release binary)
        raise Skip("an ASan/UBSan build is not the binary the image ships")
    r = run(["readelf", "-d", ARGS.dtrain])
    assert r.returncode == 0, r.stderr
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", r.stdout)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]", r.stdout)
    ldd = run(["ldd", ARGS.dtrain]).stdout
    where = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    where.update({os.path.basename(p): p for p in re.findall(r"^\s*(/\S+) \(", ldd, re.M)})
    runtime = set(apt_packages(final_stage())) | BASE_IMAGE_PACKAGES
    problems = []
    for lib in needed:
        p = where.get(lib)
        if not p or p == "not":
            problems.append(f"{lib}: not found by ldd")
            continue
        pkg = owning_package(p)
        if pkg is None:
            problems.append(f"{lib} ({p}): no Debian package owns it")
        elif pkg not in runtime:
            problems.append(f"{lib} comes from {pkg}, which the runtime stage does not install")
    assert needed, "the dtrain binary has no NEEDED entries?"
    # the OpenMP OpenBLAS is found through the RUNPATH, not the system-wide alternative
    for rp in runpath:
        for d in rp.split(":"):
            if "openblas" in d:
                p = os.path.join(d, "libopenblas.so.0")
                pkg = owning_package(p) if os.path.exists(p) else None
                if pkg not in runtime:
                    problems.append(f"RUNPATH {d}: {p} belongs to {pkg}, not installed")
    assert not problems, "; ".join(problems)


@check
def dockerfile_binary_and_entrypoint():
    stages = dockerfile()
    build = " ".join(instr(stages[0], "RUN"))
    m = re.search(r"cmake\s[^&;]*-B\s*(\S+)", build)
    assert m, "the build stage has no `cmake ... -B DIR`"
    assert re.search(r"--target\s+dtrain\b", build), \
        "the build stage does not build --target dtrain"
    bin_src = m.group(1).rstrip("/") + "/dtrain"
    found = [(frm, srcs, dest) for frm, srcs, dest in copies(stages[-1])
             if frm and dest == "/usr/local/bin/dtrain"]
    assert found, "the runtime stage does not COPY --from the build stage to /usr/local/bin/dtrain"
    assert found[0][1] == [bin_src], f"it copies {found[0][1]}, the build writes {bin_src}"
    ep = instr(stages[-1], "ENTRYPOINT")
    assert ep and json.loads(ep[-1])[0] == "/usr/local/bin/dtrain", \
        f"ENTRYPOINT {ep}: expected [\"/usr/local/bin/dtrain\", ...]"


@check
def dockerfile_copy_sources():
    stages = dockerfile()
    ignore = [ln.strip() for ln in open(path("deploy", "Dockerfile.dockerignore"))
              if ln.strip() and not ln.startswith("#")]
    assert ignore and ignore[0] == "*", "deploy/Dockerfile.dockerignore should start with * " \
                                        "(leave everything out, then name what goes in)"
    allowed = [p[1:].rstrip("/") for p in ignore if p.startswith("!")]
    problems = []
    copied = set()
    for st in stages:
        for frm, srcs, _ in copies(st):
            if frm:
                continue
            for s in srcs:
                s = s.rstrip("/")
                if not glob.glob(path(s)):
                    problems.append(f"COPY {s}: not in the repository")
                if not any(s == a or s.startswith(a + "/") for a in allowed):
                    problems.append(f"COPY {s}: left out by Dockerfile.dockerignore")
                copied.add(s)
    subdirs = re.findall(r"add_subdirectory\(\s*([\w/]+)", open(path("CMakeLists.txt")).read())
    for d in subdirs + ["src", "include"]:
        if d not in copied:
            problems.append(f"CMakeLists.txt needs {d}/ but the build stage does not COPY it")
    assert not problems, "; ".join(problems)


@check
def dockerfile_image_name_and_version():
    name = image_name()
    version = cmake_version()
    assert name.endswith(":" + version), f"image {name}: the version is not CMake's {version}"
    cmd = f"docker build -f deploy/Dockerfile -t {name} ."
    assert cmd in open(path("deploy", "Dockerfile")).read(), f"Dockerfile header lacks `{cmd}`"
    assert cmd in docs_text(), f"docs/deploy.md lacks `{cmd}`"


# ---- SSH settings shared by the image and the manifests -----------------------------------------

def sshd_settings():
    out = {}
    for ln in open(path("deploy", "docker", "sshd_config")):
        ln = ln.split("#")[0].split()
        if len(ln) >= 2:
            out[ln[0]] = ln[1]
    return out


@check
def ssh_consistency():
    _, user, home = image_user()
    sshd = sshd_settings()
    client = {}
    for ln in open(path("deploy", "docker", "ssh_config")):
        ln = ln.split("#")[0].split()
        if len(ln) >= 2:
            client[ln[0]] = ln[1]
    port = sshd.get("Port")
    wrapper = open(path("deploy", "docker", "dtrain-k8s")).read()
    m = re.search(r"DTRAIN_SSH_PORT:-(\d+)", wrapper)
    assert port and port == client.get("Port") and m and m.group(1) == port, \
        f"ssh ports differ: sshd {port}, client {client.get('Port')}, dtrain-k8s " \
        f"{m and m.group(1)}"
    assert int(port) >= 1024, f"sshd port {port}: a non-root sshd needs a port >= 1024"
    assert sshd.get("HostKey", "").startswith(home + "/.ssh/"), \
        f"HostKey {sshd.get('HostKey')} is not in {home}/.ssh (where the keys are mounted)"
    for svc_f, svc in by_kind("Service"):
        ports = [p.get("targetPort", p.get("port")) for p in svc["spec"].get("ports", [])]
        assert not ports or int(port) in ports, f"{svc_f}: Service ports {ports} lack {port}"
    inst = installed_paths(final_stage())
    for f, dest in (("sshd_config", None), ("ssh_config", "/etc/ssh/ssh_config.d/")):
        hits = [p for p in inst if os.path.basename(p) in (f, "dtrain.conf")]
        assert hits, f"deploy/docker/{f} is not installed by the Dockerfile"
    assert "/etc/dtrain/sshd_config" in inst and "/etc/dtrain/sshd_config" in wrapper, \
        "dtrain-k8s starts sshd with a config the image does not install at that path"
    assert any(p.startswith("/etc/ssh/ssh_config.d/") for p in inst), \
        "the ssh client settings are not installed in /etc/ssh/ssh_config.d/"


# ---- Kubernetes manifests -----------------------------------------------------------------------

@check
def k8s_well_formed():
    seen = set()
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    for f, d in manifests():
        for k in ("apiVersion", "kind", "metadata"):
            assert k in d, f"{f}: a document without {k}"
        name = d["metadata"].get("name")
        assert name and dns.match(name) and len(name) <= 63, f"{f}: bad metadata.name {name!r}"
        kind = d["kind"]
        assert kind in API_VERSIONS, f"{f}: kind {kind} is not one this test knows"
        assert d["apiVersion"] == API_VERSIONS[kind], \
            f"{f}: {kind} {name} has apiVersion {d['apiVersion']}, expected {API_VERSIONS[kind]}"
        assert (kind, name) not in seen, f"{f}: {kind} {name} defined twice"
        seen.add((kind, name))


@check
def k8s_pod_templates():
    uid, _, _ = image_user()
    image = image_name()
    inst = installed_paths(final_stage())
    claims = {d["metadata"]["name"] for _, d in by_kind("PersistentVolumeClaim")}
    cms = {d["metadata"]["name"] for _, d in by_kind("ConfigMap")}
    documented = set(re.findall(r"kubectl create secret generic ([a-z0-9-]+)", docs_text()))
    documented |= {d["metadata"]["name"] for _, d in by_kind("Secret")}
    for label, _, tpl in pod_templates():
        spec = tpl["spec"]
        sc = spec.get("securityContext", {})
        assert sc.get("runAsNonRoot") is True and sc.get("runAsUser") == uid, \
            f"{label}: securityContext must have runAsNonRoot: true, runAsUser: {uid}"
        assert spec.get("terminationGracePeriodSeconds", 30) >= MIN_GRACE_S, \
            f"{label}: terminationGracePeriodSeconds < {MIN_GRACE_S}: no time for the last " \
            "checkpoint"
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for v in vols.values():
            if "persistentVolumeClaim" in v:
                c = v["persistentVolumeClaim"]["claimName"]
                assert c in claims, f"{label}: claim {c} is not defined in deploy/k8s"
            if "configMap" in v:
                assert v["configMap"]["name"] in cms, \
                    f"{label}: configMap {v['configMap']['name']} is not defined in deploy/k8s"
            if "secret" in v:
                assert v["secret"]["secretName"] in documented, \
                    f"{label}: Secret {v['secret']['secretName']} is neither defined nor " \
                    "created in docs/deploy.md"
        containers = spec.get("containers", [])
        assert containers, f"{label}: no containers"
        for c in containers:
            where = f"{label} container {c.get('name')}"
            assert c.get("name") and c.get("image"), f"{where}: needs a name and an image"
            assert c["image"] == image, \
                f"{where}: image {c['image']}, the Dockerfile builds {image}"
            cmd = c.get("command")
            assert cmd, f"{where}: no command (the image's ENTRYPOINT is dtrain itself)"
            assert cmd[0] in inst, f"{where}: command {cmd[0]} is not installed by the Dockerfile"
            for ef in c.get("envFrom", []):
                ref = ef.get("secretRef")
                if ref:
                    assert ref["name"] in documented, \
                        f"{where}: Secret {ref['name']} is not created in docs/deploy.md"
            for m in c.get("volumeMounts", []):
                assert m["name"] in vols, f"{where}: mount of unknown volume {m['name']}"
            res = c.get("resources", {})
            for kind in ("cpu", "memory"):
                req = res.get("requests", {}).get(kind)
                lim = res.get("limits", {}).get(kind)
                assert req is not None and lim is not None, f"{where}: {kind} request and limit"
                conv = cpu if kind == "cpu" else mem
                assert conv(req) <= conv(lim), f"{where}: {kind} request {req} > limit {lim}"


def launch_checks(label, tpl, container, argv, workers, slots):
    opts, config, overrides = split_launch(argv)
    n = int(opts.get("-n", opts.get("--workers", 0)))
    assert n == workers * slots, f"{label}: dtrain launch -n {n}, but {workers} pods x {slots} " \
                                 "slots"
    threads = int(opts.get("--threads-per-worker", 1))
    lim = cpu(main_container(tpl)["resources"]["limits"]["cpu"])
    assert threads * slots <= lim, f"{label}: {slots} workers x {threads} threads > CPU limit {lim}"
    return opts, config, overrides, threads


@check
def k8s_mpijob():
    jobs = by_kind("MPIJob")
    assert jobs, "no MPIJob in deploy/k8s"
    _, _, home = image_user()
    for f, job in jobs:
        name = f"{f} {job['metadata']['name']}"
        spec = job["spec"]
        assert set(spec) <= MPIJOB_SPEC_KEYS, \
            f"{name}: unknown spec keys {set(spec) - MPIJOB_SPEC_KEYS}"
        rp = spec.get("runPolicy", {})
        assert set(rp) <= RUN_POLICY_KEYS, \
            f"{name}: unknown runPolicy keys {set(rp) - RUN_POLICY_KEYS}"
        assert rp.get("cleanPodPolicy") in ("All", "Running", "None"), \
            f"{name}: runPolicy.cleanPodPolicy {rp.get('cleanPodPolicy')}"
        assert isinstance(rp.get("backoffLimit"), int) and rp["backoffLimit"] >= 0, \
            f"{name}: runPolicy.backoffLimit must be set (launcher restarts resume the run)"
        slots = spec.get("slotsPerWorker", 1)
        assert isinstance(slots, int) and slots >= 1, f"{name}: slotsPerWorker {slots}"
        assert spec.get("mpiImplementation", "OpenMPI") == "OpenMPI", \
            f"{name}: the image has Open MPI"
        assert spec.get("sshAuthMountPath") == home + "/.ssh", \
            f"{name}: sshAuthMountPath {spec.get('sshAuthMountPath')}, the image's user " \
            f"has {home}/.ssh"
        reps = spec["mpiReplicaSpecs"]
        assert set(reps) == {"Launcher", "Worker"}, f"{name}: replica types {set(reps)}"
        for role, rs in reps.items():
            assert rs.get("restartPolicy", "Never") in ("Always", "OnFailure", "Never", "ExitCode")
            assert "template" in rs and rs["template"]["spec"]["containers"], f"{name} {role}"
        assert reps["Launcher"].get("replicas") == 1, f"{name}: Launcher replicas must be 1"
        workers = reps["Worker"].get("replicas")
        assert isinstance(workers, int) and workers >= 1, f"{name}: Worker replicas {workers}"
        wc = main_container(reps["Worker"]["template"])
        assert wc["command"][-1] == "worker" and wc["command"][0].endswith("dtrain-k8s"), \
            f"{name}: workers must run `dtrain-k8s worker` (sshd that forwards SIGTERM)"
        lt = reps["Launcher"]["template"]
        hits = [x for x in launch_commands() if x[2] is lt]
        assert hits, f"{name}: the launcher does not run dtrain launch"
        _, _, _, lc, argv = hits[0]
        assert lc["command"][:2] == ["/usr/local/bin/dtrain-k8s", "launcher"], \
            f"{name}: the launcher should wait for the workers (dtrain-k8s launcher ...)"
        opts, _, _, _ = launch_checks(name + " Launcher", reps["Worker"]["template"], lc, argv,
                                      workers, slots)
        assert opts.get("--hostfile") == "/etc/mpi/hostfile", \
            f"{name}: dtrain launch should read the operator's --hostfile /etc/mpi/hostfile"


@check
def k8s_indexed_job():
    jobs = by_kind("Job")
    assert jobs, "no batch/v1 Job in deploy/k8s"
    services = {d["metadata"]["name"]: d for _, d in by_kind("Service")}
    for f, job in jobs:
        name = f"{f} {job['metadata']['name']}"
        spec, tpl = job["spec"], job["spec"]["template"]
        assert spec.get("completionMode") == "Indexed", f"{name}: completionMode must be Indexed"
        pods = spec.get("completions")
        assert isinstance(pods, int) and pods >= 1 and spec.get("parallelism") == pods, \
            f"{name}: completions {pods} and parallelism {spec.get('parallelism')} must be equal"
        if "podFailurePolicy" in spec:
            assert tpl["spec"].get("restartPolicy") == "Never", \
                f"{name}: podFailurePolicy needs restartPolicy Never"
            codes = [r for r in spec["podFailurePolicy"]["rules"] if "onExitCodes" in r]
            cnames = {c["name"] for c in tpl["spec"]["containers"]}
            assert any(75 in r["onExitCodes"]["values"] and r["action"] == "Ignore"
                       for r in codes), f"{name}: exit 75 (checkpoint saved) should be Ignore'd"
            for r in codes:
                cn = r["onExitCodes"].get("containerName")
                assert cn is None or cn in cnames, f"{name}: podFailurePolicy names {cn}"
            for r in spec["podFailurePolicy"]["rules"]:
                for pc in r.get("onPodConditions", []):
                    assert pc.get("status") in ("True", "False", "Unknown"), \
                        f"{name}: onPodConditions {pc} needs a status (required before 1.31)"
        sub = tpl["spec"].get("subdomain")
        assert sub in services, f"{name}: subdomain {sub} is not a Service in deploy/k8s"
        svc = services[sub]["spec"]
        assert svc.get("clusterIP") == "None", f"Service {sub} must be headless (clusterIP: None)"
        assert svc.get("publishNotReadyAddresses") is True, \
            f"Service {sub}: publishNotReadyAddresses: true, or peers cannot resolve while starting"
        sel, lab = svc.get("selector", {}), tpl.get("metadata", {}).get("labels", {})
        assert sel and all(lab.get(k) == v for k, v in sel.items()), \
            f"Service {sub} selects {sel}, the pods are labelled {lab}"
        hits = [x for x in launch_commands() if x[2] is tpl]
        assert hits, f"{name}: no dtrain launch"
        _, _, _, c, argv = hits[0]
        assert c["command"][:2] == ["/usr/local/bin/dtrain-k8s", "indexed"], \
            f"{name}: pods must run `dtrain-k8s indexed dtrain launch ...`"
        opts, _, _ = split_launch(argv)
        hosts = opts.get("--hosts", "").split(",")
        jn = job["metadata"]["name"]
        slots = int(hosts[0].rpartition(":")[2]) if hosts and ":" in hosts[0] else 1
        want = [f"{jn}-{i}.{sub}:{slots}" for i in range(pods)]
        assert hosts == want, f"{name}: --hosts {','.join(hosts)}; the pods are {','.join(want)}"
        launch_checks(name, tpl, c, argv, pods, slots)
        _, _, home = image_user()
        sshd = sshd_settings()
        vol = volume_for(tpl, c, home + "/.ssh")
        assert vol and vol[1] and "secret" in vol[1], f"{name}: no SSH key Secret at {home}/.ssh"
        keys = {i["path"] for i in vol[1]["secret"].get("items", [])}
        need = {os.path.basename(sshd["HostKey"]),
                os.path.basename(sshd.get("AuthorizedKeysFile", ".ssh/authorized_keys"))}
        assert need <= keys, f"{name}: the key Secret provides {keys}, sshd needs {need}"


@check
def k8s_launch_options():
    r = run([ARGS.dtrain, "launch", "--help"])
    text = r.stdout + r.stderr
    assert "--threads-per-worker" in text, \
        f"`dtrain launch --help` does not list its options: {text}"
    sources = glob.glob(path("src", "**", "*.c"), recursive=True)
    used_aws = set(re.findall(r'"(AWS_[A-Z_]+)"', "".join(
        open(f, errors="replace").read() for f in sources)))
    assert used_aws, "found no AWS_* variables in src/ (the test reads them from there)"
    for label, _, _, _, argv in launch_commands():
        opts, _, _ = split_launch(argv)
        for o in opts:
            assert re.search(rf"(^|[\s\[|]){re.escape(o)}\b", text), \
                f"{label}: dtrain launch has no option {o}"
        port = opts.get("--monitor-port")
        if port:
            c = [x for x in launch_commands() if x[0] == label][0][3]
            ports = [p.get("containerPort") for p in c.get("ports", [])]
            assert int(port) in ports, f"{label}: --monitor-port {port} is not a containerPort"
            addr = opts.get("--monitor-addr", "127.0.0.1")
            assert not addr.startswith("127.") and addr != "localhost", \
                f"{label}: --monitor-addr {addr} cannot be reached from outside the pod"
        fwd = set(re.findall(r"-x\s+(\w+)", opts.get("--mpirun-args", "")))
        assert used_aws <= fwd, f"{label}: ranks started over ssh do not get {used_aws - fwd} " \
                                "(forward them with --mpirun-args \"-x VAR ...\")"


def workload_config(label, wl, tpl, c, argv):
    """(config dict, overrides) of a launch command, with the file checked on every pod."""
    _, cfg_path, overrides = split_launch(argv)
    text = None
    for lab2, tpl2 in templates_of(wl):
        t = configmap_file(tpl2, main_container(tpl2), cfg_path)
        assert text is None or t == text, f"{lab2}: another config at {cfg_path}"
        text = t
    return yaml.safe_load(text), text, overrides


@check
def k8s_config_keys():
    keys = help_config_keys()
    for label, wl, tpl, c, argv in launch_commands():
        cfg, _, overrides = workload_config(label, wl, tpl, c, argv)
        flat = flatten(cfg)
        for o in overrides:
            k, eq, v = o.partition("=")
            assert eq, f"{label}: override {o} is not section.key=value"
            flat[k] = v
        bad = sorted(set(flat) - keys)
        assert not bad, f"{label}: keys that dtrain does not know: {bad}"
        assert flat.get("output.run_name"), \
            f"{label}: no output.run_name: each restart would start a new run instead of resuming"
        assert flat.get("ckpt.resume", "auto") == "auto", f"{label}: ckpt.resume must be auto"
        # checkpoints and the run directory on a shared volume in every pod of the workload;
        # launch creates the run directory itself, so the launcher needs output.dir too
        for lab2, tpl2 in templates_of(wl):
            for k in ("ckpt.dir", "output.dir"):
                p = str(flat.get(k, ""))
                if k == "ckpt.dir" and (not p or "://" in p):
                    continue
                hit = volume_for(tpl2, main_container(tpl2), p)
                assert p.startswith("/") and hit and hit[1] and \
                    "persistentVolumeClaim" in hit[1], \
                    f"{lab2}: {k}={p} is not on a PersistentVolumeClaim"
                assert not [m for m in main_container(tpl2)["volumeMounts"]
                            if m["mountPath"] == hit[0] and m.get("readOnly")], \
                    f"{lab2}: {k}={p} is mounted read-only"
        workers = [(lab2, tpl2) for lab2, tpl2 in templates_of(wl) if not lab2.endswith("Launcher")]
        for lab2, tpl2 in workers:
            for k in ("data.train", "data.val"):
                p = str(flat.get(k, ""))
                if p:
                    hit = volume_for(tpl2, main_container(tpl2), p)
                    assert hit and hit[1] and "persistentVolumeClaim" in hit[1], \
                        f"{lab2}: {k}={p} is not on a volume"


@check
def k8s_config_plan():
    for label, wl, tpl, c, argv in launch_commands():
        opts, cfg_path, overrides = split_launch(argv)
        _, text, _ = workload_config(label, wl, tpl, c, argv)
        n = int(opts.get("-n", opts.get("--workers")))
        threads = int(opts.get("--threads-per-worker", 1))
        with tempfile.TemporaryDirectory() as tmp:
            f = os.path.join(tmp, "config.yaml")
            open(f, "w").write(text)
            r = run([ARGS.dtrain, "plan", f, "-n", str(n), "--json", *overrides,
                     f"train.threads={threads}"], cwd=tmp)
        assert r.returncode == 0, f"{label}: dtrain plan rejects the config: {r.stderr.strip()}"
        plan = json.loads(r.stdout)
        assert plan["world"] == n, f"{label}: plan for {plan['world']} workers, not {n}"
        workers = [t for lab2, t in templates_of(wl) if not lab2.endswith("Launcher")]
        assert workers, f"{label}: no worker pods"
        for t in workers:
            # workers per pod: --hosts' slots (Indexed Job) or slotsPerWorker (MPIJob)
            hosts = opts.get("--hosts")
            if hosts:
                slots = max(int(h.rpartition(":")[2]) for h in hosts.split(","))
            else:
                mj = [d for _, d in by_kind("MPIJob")
                      if d["spec"]["mpiReplicaSpecs"]["Worker"]["template"] is t]
                assert mj, f"{label}: cannot tell how many workers a pod runs"
                slots = mj[0]["spec"].get("slotsPerWorker", 1)
            lim = mem(main_container(t)["resources"]["limits"]["memory"])
            need = 1.5 * plan["total_bytes"] * slots
            assert lim >= need, \
                f"{label}: worker memory limit {lim / 2**30:.2f} GiB < 1.5 x dtrain plan's " \
                f"{plan['total_bytes'] / 2**30:.2f} GiB x {slots} slots"


# ---- the pod entrypoint (deploy/docker/dtrain-k8s), run for real with stand-ins ----------------

WRAPPER = None


def wrapper_env(tmp, **extra):
    env = dict(os.environ)
    env.update({"DTRAIN_SSHD": "sleep 600", "DTRAIN_WAIT_S": "3", "HOME": tmp,
                "DTRAIN_DONE_FILE": os.path.join(tmp, "done")})
    env.update(extra)
    return env


def fake_worker(tmp, name, exit_code=75, delay=1.0):
    """A stand-in training process whose executable is named NAME (a copy of bash). Like dtrain it
    re-executes itself through /proc/self/exe first, so its process name becomes "exe". On SIGTERM
    it leaves NAME.got, 'saves' (DELAY s), leaves NAME.saved and exits EXIT_CODE. Returns its
    argv."""
    exe = os.path.join(tmp, name)
    shutil.copy("/bin/bash", exe)
    script = exe + ".sh"
    with open(script, "w") as fh:
        fh.write('[ -z "$DTFK_REEXEC" ] && DTFK_REEXEC=1 exec /proc/self/exe "$0" "$@"\n'
                 f"trap 'echo > \"{exe}.got\"; sleep {delay}; echo > \"{exe}.saved\"; "
                 f"exit {exit_code}' TERM\n"
                 f"echo > \"{exe}.ready\"\n"  # the trap is set: SIGTERM now means "save"
                 "while :; do sleep 0.1; done\n")
    return [exe, script]


class Listener:
    """One port listened on at 127.0.0.1 and 127.0.0.2: a stand-in sshd for the hosts localhost,
    127.0.0.1 and 127.0.0.2 (an address with no name, which must not need a reverse lookup)."""

    def __init__(self):
        for _ in range(20):
            a = socket.socket()
            a.bind(("127.0.0.2", 0))
            self.port = a.getsockname()[1]
            b = socket.socket()
            try:
                b.bind(("127.0.0.1", self.port))
            except OSError:
                a.close()
                b.close()
                continue
            a.listen(8)
            b.listen(8)
            self.socks = [a, b]
            return
        raise Skip("no free port on both 127.0.0.1 and 127.0.0.2")

    def close(self):
        for x in self.socks:
            x.close()


def wait_for(pred, timeout=10.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def runs_exe(pid, name):
    """Whether process PID runs the executable NAME after its re-exec (process name "exe")."""
    try:
        return (os.path.basename(os.readlink(f"/proc/{pid}/exe")) == name and
                open(f"/proc/{pid}/comm").read().strip() == "exe")
    except OSError:
        return False


def worker_wrapper_run(tmp, name, forward, delay=2.0):
    """Starts a stand-in worker and `dtrain-k8s worker`, sends SIGTERM to the wrapper and (when
    the wrapper does not forward it) 1 s later to the worker, as mpirun does on the launcher's
    behalf. The worker's save takes DELAY s, more than that 1 s, so that a forwarded signal
    cannot have ended it by then. Returns (wrapper status, whether the wrapper signalled the
    worker, seconds from the worker's signal to the wrapper's exit, worker status, stderr)."""
    got = os.path.join(tmp, name + ".got")
    for f in (got, os.path.join(tmp, name + ".saved"), os.path.join(tmp, name + ".ready")):
        if os.path.exists(f):
            os.remove(f)
    rank = subprocess.Popen(fake_worker(tmp, name, delay=delay))
    # reap it when it exits, as orted does in a pod (a zombie still has its name in /proc)
    reaper = threading.Thread(target=rank.wait, daemon=True)
    reaper.start()
    try:
        assert wait_for(lambda: runs_exe(rank.pid, name)), "the stand-in worker did not start"
        # its trap is set only once it wrote NAME.ready (a SIGTERM before that would end it)
        assert wait_for(lambda: os.path.exists(os.path.join(tmp, name + ".ready"))), \
            "the stand-in worker did not set its trap"
        env = wrapper_env(tmp, DTRAIN_PROC_NAME=name, DTRAIN_FORWARD_TERM=str(int(forward)))
        w = subprocess.Popen([WRAPPER, "worker"], env=env, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert w.poll() is None, f"dtrain-k8s worker exited early: {w.communicate()[1]}"
        w.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert w.poll() is None, "dtrain-k8s worker exited while its worker was still running"
        # a forwarding wrapper finds the worker in /proc and signals it; on a loaded machine
        # (every process under the sanitizer's preload) that can take longer than the 1 s above
        signalled = os.path.exists(got) or (forward and wait_for(lambda: os.path.exists(got), 5))
        if not forward:
            assert not signalled, "the wrapper signalled the worker although forwarding is off"
        t0 = time.time()
        if rank.returncode is None and not forward:
            rank.send_signal(signal.SIGTERM)  # the launcher's stop request, via mpirun
        rc = w.wait(timeout=20)
        took = time.time() - t0
        reaper.join(timeout=5)
        return rc, signalled, took, rank.returncode, w.stderr.read()
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()


@check
def wrapper_worker_waits_for_workers():
    with tempfile.TemporaryDirectory() as tmp:
        name = f"dtfk{os.getpid() % 100000}w"
        # default: the wrapper leaves the stop request to dtrain launch and waits for the workers
        rc, _, took, rank_rc, err = worker_wrapper_run(tmp, name, forward=False)
        assert rc == 0 and rank_rc == 75, f"wrapper exited {rc}, worker {rank_rc}: {err}"
        assert took >= 1.9, f"the wrapper exited {took:.2f} s after the worker was asked to " \
                            "stop, before its 2 s save was done"
        # DTRAIN_FORWARD_TERM=1: the wrapper passes SIGTERM on and waits for the save
        rc, signalled, _, rank_rc, err = worker_wrapper_run(tmp, name, forward=True)
        assert signalled and rank_rc == 75, \
            f"the worker did not get SIGTERM from the wrapper: {err}"
        assert rc == 0, f"wrapper exited {rc}: {err}"
        # without a training process it stops at once
        w = subprocess.Popen([WRAPPER, "worker"], env=wrapper_env(tmp, DTRAIN_PROC_NAME=name),
                             stderr=subprocess.PIPE)
        time.sleep(0.3)
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=5) == 0
        # a dying sshd fails the pod (so that Kubernetes restarts it)
        w = subprocess.run([WRAPPER, "worker"], env=wrapper_env(tmp, DTRAIN_SSHD="false"),
                           capture_output=True, timeout=10)
        assert w.returncode != 0, "dtrain-k8s worker exited 0 when sshd died"


@check
def wrapper_launcher_waits_for_hosts():
    with tempfile.TemporaryDirectory() as tmp:
        s = Listener()
        port = s.port
        hf = os.path.join(tmp, "hostfile")
        open(hf, "w").write("# operator's hostfile\n127.0.0.2 slots=1\nlocalhost slots=2\n")
        env = wrapper_env(tmp, DTRAIN_HOSTFILE=hf, DTRAIN_SSH_PORT=str(port))
        r = run([WRAPPER, "launcher", "sh", "-c", "echo launched $0", "x"], env=env, timeout=30)
        assert r.returncode == 0 and r.stdout.strip() == "launched x", \
            f"launcher did not exec its command: rc {r.returncode} {r.stdout} {r.stderr}"
        s.close()  # now nothing listens: it must give up after DTRAIN_WAIT_S
        t0 = time.time()
        r = run([WRAPPER, "launcher", "sh", "-c", "echo launched"], env=env, timeout=30)
        assert r.returncode == 1 and "launched" not in r.stdout, \
            f"launcher started without reachable hosts: rc {r.returncode} {r.stdout}"
        assert time.time() - t0 < 15, "launcher did not respect DTRAIN_WAIT_S"
        open(hf, "w").write("no-such-host.invalid slots=1\n")
        r = run([WRAPPER, "launcher", "true"], env=env, timeout=90)
        assert r.returncode == 1 and "no-such-host.invalid" in r.stderr, r.stderr


@check
def wrapper_indexed_job():
    with tempfile.TemporaryDirectory() as tmp:
        # index 1: serves until index 0 hands over a status, then exits with it
        env1 = wrapper_env(tmp, JOB_COMPLETION_INDEX="1")
        w = subprocess.Popen([WRAPPER, "indexed", "dtrain", "launch"], env=env1,
                             stderr=subprocess.PIPE)
        time.sleep(0.5)
        assert w.poll() is None, "index 1 exited before index 0 finished"
        assert run([WRAPPER, "finish", "75"], env=env1).returncode == 0
        assert w.wait(timeout=10) == 75, "index 1 did not exit with index 0's status"
        # index 0: waits for the hosts, runs the command, hands its status to the others (ssh)
        s = Listener()
        port = s.port
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        os.symlink(WRAPPER, os.path.join(bindir, "dtrain-k8s"))
        ssh_log = os.path.join(tmp, "ssh.log")
        fake_ssh = os.path.join(bindir, "fake-ssh")
        open(fake_ssh, "w").write(f"#!/bin/sh\necho \"$@\" >> {ssh_log}\nshift\n"
                                  f"DTRAIN_DONE_FILE={tmp}/peer-done exec \"$@\"\n")
        os.chmod(fake_ssh, 0o755)
        name = f"dtfk{os.getpid() % 100000}i"
        # saves at once: it exits while the wrapper's SIGTERM handler still scans /proc, and the
        # wrapper must still report its 75 (it reported 143 when it asked `kill -0` whether the
        # child was alive after its interrupted `wait`: bash had reaped it already)
        launch = fake_worker(tmp, name, exit_code=75, delay=0.0)
        env0 = wrapper_env(tmp, JOB_COMPLETION_INDEX="0", DTRAIN_SSH_PORT=str(port),
                           DTRAIN_SSH=fake_ssh, DTRAIN_PROC_NAME=name,
                           PATH=bindir + os.pathsep + os.environ["PATH"])
        hosts = "127.0.0.2:1,localhost:1"
        r = run([WRAPPER, "indexed", "sh", "-c", "exit 3", "x", "--hosts", hosts], env=env0,
                timeout=30)
        assert r.returncode == 3, f"index 0 exited {r.returncode}, its command 3: {r.stderr}"
        assert open(ssh_log).read().split() == ["localhost", "dtrain-k8s", "finish", "3"], \
            f"index 0 told its peers: {open(ssh_log).read()!r}"
        assert open(os.path.join(tmp, "peer-done")).read().strip() == "3"
        # SIGTERM to index 0 reaches the launch process, which saves (exit 75); peers get 75
        os.remove(ssh_log)
        if os.path.exists(launch[0] + ".ready"):
            os.remove(launch[0] + ".ready")
        w = subprocess.Popen([WRAPPER, "indexed", *launch, "--hosts", hosts], env=env0,
                             stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: any(runs_exe(p, name) for p in os.listdir("/proc")
                                    if p.isdigit())), "launch did not start"
        # a SIGTERM before the stand-in has set its trap kills it (143: seen under ASan's load)
        assert wait_for(lambda: os.path.exists(launch[0] + ".ready")), "launch set no trap"
        w.send_signal(signal.SIGTERM)
        rc = w.wait(timeout=20)
        err = w.stderr.read()
        assert rc == 75, f"index 0 exited {rc} after SIGTERM, expected the checkpoint's 75: {err}"
        assert os.path.exists(launch[0] + ".saved"), "the launch process did not get SIGTERM"
        assert open(os.path.join(tmp, "peer-done")).read().strip() == "75"
        s.close()
        r = run([WRAPPER, "indexed", "true"], env=wrapper_env(tmp), timeout=10)
        assert r.returncode == 2 and "JOB_COMPLETION_INDEX" in r.stderr, \
            "dtrain-k8s indexed ran outside an Indexed Job"


# ---- Slurm --------------------------------------------------------------------------------------

SBATCH = None


@check
def slurm_directives():
    r = run(["bash", "-n", SBATCH])
    assert r.returncode == 0, f"bash -n: {r.stderr}"
    directives, body_started = {}, False
    for ln in open(SBATCH):
        s = ln.strip()
        if s.startswith("#SBATCH"):
            assert not body_started, f"#SBATCH after the first command is ignored by sbatch: {s}"
            opt = s.split()[1]
            k, _, v = opt.partition("=")
            directives[k] = v
        elif s and not s.startswith("#"):
            body_started = True
    for k in ("--nodes", "--ntasks-per-node", "--cpus-per-task", "--time", "--signal",
              "--requeue"):
        assert k in directives, f"no #SBATCH {k}"
    m = re.fullmatch(r"(?:([RB]):)?(?:SIG)?(TERM|USR1|INT)@(\d+)", directives["--signal"])
    assert m, f"--signal={directives['--signal']}: expected TERM@SECONDS"
    assert m.group(1) != "B", "--signal=B:... signals only the batch shell, not the workers"
    sig_s = re.search(r"^SIGNAL_S=(\d+)", open(SBATCH).read(), re.M)
    assert sig_s and sig_s.group(1) == m.group(3), \
        f"SIGNAL_S={sig_s and sig_s.group(1)} differs from --signal=...@{m.group(3)}"
    keys = help_config_keys()
    used = set(re.findall(r"\s([a-z_]+\.[a-z_]+)=\"", open(SBATCH).read()))
    assert used and used <= keys, f"overrides in train.sbatch that dtrain does not know: " \
                                  f"{used - keys}"


@check
def slurm_time_parsing():
    cases = {"1-02:03:04": 93784, "02:03:04": 7384, "03:04": 184, "00:59": 59, "10:00:00": 36000}
    for t, want in cases.items():
        r = run(["bash", "-c", f'source "{SBATCH}" && slurm_seconds "{t}"'])
        assert r.returncode == 0 and int(r.stdout) == want, f"slurm_seconds {t}: {r.stdout}"
    for t in ("UNLIMITED", "INVALID", "", "1:2:3:4"):
        r = run(["bash", "-c", f'source "{SBATCH}" && slurm_seconds "{t}"'])
        assert r.returncode != 0, f"slurm_seconds {t!r} should fail, printed {r.stdout}"


@check
def slurm_requeue():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log")
        for name, body in (("srun", f'echo "srun $*" >> {log}\nexit "$FAKE_RC"\n'),
                           ("squeue", 'echo "$FAKE_LEFT"\n'),
                           ("scontrol", f'echo "scontrol $*" >> {log}\n')):
            f = os.path.join(tmp, name)
            open(f, "w").write("#!/bin/sh\n" + body)
            os.chmod(f, 0o755)
        base = dict(os.environ, PATH=tmp + os.pathsep + os.environ["PATH"], SLURM_JOB_ID="4242",
                    SLURM_CPUS_PER_TASK="8", SLURM_NTASKS="2", SLURM_JOB_NODELIST="n[1-2]")

        def go(rc, left, *args):
            if os.path.exists(log):
                os.remove(log)
            r = run(["bash", SBATCH, "cfg.yaml", *args], env=dict(base, FAKE_RC=str(rc),
                                                                  FAKE_LEFT=left), cwd=tmp)
            return r, (open(log).read() if os.path.exists(log) else "")

        r, out = go(75, "2:30", "data.batch=64")
        assert r.returncode == 75 and "scontrol requeue 4242" in out, \
            f"a checkpoint 150 s before the limit was not requeued: {r.returncode} {out} {r.stderr}"
        srun = out.splitlines()[0].split()
        assert "--mpi=pmix" in srun and srun[srun.index("train") - 1] == "dtrain", srun
        rest = srun[srun.index("train") + 1:]
        assert rest[0] == "cfg.yaml" and rest[-1] == "data.batch=64" and \
            "output.run_name=slurm-4242" in rest and "train.threads=8" in rest, \
            f"srun runs {' '.join(srun)}"
        r, out = go(75, "5:00:00")
        assert r.returncode == 75 and "requeue" not in out, \
            "workers stopped on request 5 h before the limit were requeued"
        r, out = go(0, "2:30")
        assert r.returncode == 0 and "requeue" not in out, "a finished job was requeued"
        r, out = go(1, "2:30")
        assert r.returncode == 1 and "requeue" not in out, "a failed job was requeued"
        r, out = go(75, "UNLIMITED")
        assert r.returncode == 75 and "requeue" not in out
        r = run(["bash", SBATCH], env=base)
        assert r.returncode == 2 and "usage" in r.stderr


# ---- docs ---------------------------------------------------------------------------------------

@check
def docs_cover_deploy_files():
    text = docs_text()
    files = [os.path.relpath(f, ARGS.root) for f in glob.glob(path("deploy", "**", "*"),
                                                              recursive=True)
             if os.path.isfile(f)]
    missing = sorted(f for f in files if f not in text)
    assert not missing, f"docs/deploy.md does not mention {missing}"
    for phrase in ("75", "SIGTERM", "ckpt.resume", "output.run_name"):
        assert phrase in text, f"docs/deploy.md does not explain {phrase}"


def main():
    global ARGS, WRAPPER, SBATCH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="repository root")
    ap.add_argument("--dtrain", required=True, help="the built dtrain binary")
    ap.add_argument("--sanitized", action="store_true",
                    help="the binary is an ASan/UBSan build: skip the image library check")
    ap.add_argument("-k", help="run only the checks whose name contains this")
    ARGS = ap.parse_args()
    ARGS.root = os.path.abspath(ARGS.root)
    WRAPPER = path("deploy", "docker", "dtrain-k8s")
    SBATCH = path("deploy", "slurm", "train.sbatch")
    counts = {"ok": 0, "fail": 0, "skip": 0}
    for fn in CHECKS:
        if ARGS.k and ARGS.k not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            print(f"{fn.__name__}: ok ({time.time() - t0:.1f} s)")
            counts["ok"] += 1
        except Skip as e:
            print(f"{fn.__name__}: SKIP: {e}")
            counts["skip"] += 1
        except (AssertionError, KeyError, TypeError, ValueError, OSError,
                subprocess.TimeoutExpired, yaml.YAMLError) as e:
            kind = "" if isinstance(e, AssertionError) else type(e).__name__ + ": "
            print(f"{fn.__name__}: FAIL: {kind}{e}")
            counts["fail"] += 1
        sys.stdout.flush()
    line = f"{counts['ok']} passed, {counts['fail']} failed"
    if counts["skip"]:
        line += f", {counts['skip']} skipped"
    print(line)
    return 1 if counts["fail"] or not counts["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())

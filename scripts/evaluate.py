#!/usr/bin/env python3
"""`make evaluate`: the seed system's evaluation, measured here, written to docs/evaluation.md.

  scripts/evaluate.py --build build [--work eval-out] [--images 768] [--batch 32] [--quick]
  scripts/evaluate.py --build build --image 224      (ResNet-152 on photos at 224x224, below)

Every number on the page comes from this run (the page lists the experiment-store run ids):
 1. ResNet-152 (small-image stem, Fashion-MNIST) seconds per epoch-slice of --images images in
    three formations: 1 host x 1 worker, 1 host x 2 workers, 2 hosts x 1 worker (network
    namespaces joined by a veth link; MPI traffic crosses a real interface), one thread per
    worker; speedup and scaling efficiency against 1 worker;
 2. the data-loading throughput (bench_data's loader, one copy per worker of the formation) and
    the checkpoint-saving throughput (the trainer's end-of-run checkpoint) in each formation;
 3. inter-node overhead: 2 hosts x 1 worker against 1 host x 2 workers;
 4. reliability: consecutive `dtrain launch` runs with workers killed after checkpoints, all
    completed, progress lost per failure against the checkpoint interval;
 5. LoRA: the `make lora-demo` finetune (losses, memory) and `dtrain plan` for Llama-3.1-8B;
 6. the same ResNet workload with PyTorch DDP and with Ray Train (bench/peers/ray_resnet.py):
    seconds per epoch-slice, checkpoint save time, time to recover from a killed worker.
--image 224 runs parts 1-3 and 6 (recovery, and the peers on the same photos) on the photo
pipeline instead:
generated JPEGs (bench/gen_photos.py, 256 photos of 500x375 .. 1024x768, 4 classes) imported as
encoded images, examples/resnet152-imagenet.yaml (stock 7x7 stem, RandomResizedCrop(224) + flip
decoded in the loader), batch 8 and 64-image slices by default (a 2-core machine does ~2 images/s
per core); the loading column is bench_loader's decode + crop figure. It writes
docs/evaluation-224.md; the reliability and LoRA parts stay on the 28x28 page.
Plain Python 3 (no packages, Pillow from the venv for the photos); the peers run in the reference venv (scripts/setup-venv.sh,
scripts/setup-ray.sh)."""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(os.environ.get("DT_VENV", os.path.expanduser("~/.cache/dtrain/venv")),
                       "bin", "python")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"] + (
    ["--allow-run-as-root"] if os.geteuid() == 0 else [])
ENV = dict(os.environ, OMP_NUM_THREADS="1", GOMP_SPINCOUNT="1000")


def say(*a):
    print("evaluate:", *a, flush=True)


COMMANDS = []  # every command started, for the page


def portable(text, work, build):
    """`text` with this machine's absolute paths replaced by names a reader can map to their
    own: the page must not carry the paths of the machine that generated it."""
    venv = os.path.dirname(os.path.dirname(VENV_PY))
    inside = build.startswith(REPO.rstrip("/") + "/")
    for path, name in ((work, "WORK"), (venv, "VENV"), ("" if inside else build, "BUILD"),
                       (REPO, "."), (os.path.expanduser("~"), "~")):
        if path and path != "/":
            text = text.replace(path.rstrip("/"), name)
    return text


def note(cmd):
    COMMANDS.append(" ".join(str(c) for c in cmd))


def run(cmd, log, env=ENV, timeout=3600, cwd=None, check=True):
    """Runs cmd with its output in `log`; returns (seconds, text)."""
    note(cmd)
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                           cwd=cwd)
    dt = time.time() - t0
    text = open(log, errors="replace").read()
    if check and p.returncode != 0:
        sys.exit(f"evaluate: {' '.join(cmd[:4])} ... failed (exit {p.returncode}); see {log}:\n"
                 + text[-3000:])
    return dt, text


def run_lines(cmd, log, on_line, env=ENV, cwd=None):
    """Runs cmd, calling on_line(t, line, proc) for each output line as it arrives (wall time t).
    Returns (exit status, seconds)."""
    note(cmd)
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             cwd=cwd, text=True, errors="replace", bufsize=1)
        for line in p.stdout:
            f.write(f"{time.time() - t0:9.3f} {line}")
            on_line(time.time(), line, p)
        p.wait()
    return p.returncode, time.time() - t0


class Eval:
    def __init__(self, a):
        self.a = a
        self.dtrain = os.path.abspath(os.path.join(a.build, "dtrain"))
        self.bench_data = os.path.abspath(os.path.join(a.build, "bench", "bench_data"))
        self.work = os.path.abspath(a.work)
        self.runs = os.path.join(self.work, "runs")
        self.logs = os.path.join(self.work, "logs")
        self.fm = os.path.join(self.work, "fmnist")
        self.photos = os.path.join(self.work, "photos-ds")  # --image 224's encoded-image dataset
        self.jpegs = os.path.join(self.work, "photos")  # ... and its JPEGs (the peers read them)
        self.bench_loader = os.path.abspath(os.path.join(a.build, "bench", "bench_loader"))
        self.r = {"formations": {}, "peers": {}, "reliability": [], "run_ids": {}}
        os.makedirs(self.logs, exist_ok=True)

    def log(self, name):
        return os.path.join(self.logs, name + ".log")

    # ---- data and environment --------------------------------------------------------------

    def prepare(self):
        # from scratch: fixed run names would otherwise resume the previous evaluation's runs
        if not self.a.only:
            shutil.rmtree(self.runs, ignore_errors=True)
        if not os.path.exists(os.path.join(self.fm, "train", "manifest.json")):
            run([self.dtrain, "data", "import", "fashion-mnist",
                 "/usr/share/datasets/fashion-mnist", "-o", self.fm, "-q"], self.log("import"))
        if self.a.image == 224 and not os.path.isdir(self.jpegs):
            run([VENV_PY, os.path.join(REPO, "bench", "gen_photos.py"), self.jpegs],
                self.log("photos"))
        if self.a.image == 224 and not os.path.exists(os.path.join(self.photos, "train", "manifest.json")):
            run([self.dtrain, "data", "import", "images", self.jpegs, "-o", self.photos, "-q"],
                self.log("import-photos"))
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), "?")
        mem = next((int(l.split()[1]) // 1048576 for l in open("/proc/meminfo")
                    if l.startswith("MemTotal")), 0)
        mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
        git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or "?"
        peers = subprocess.run([VENV_PY, "-c", "import torch, importlib.metadata as m\n"
                                "v = lambda p: m.version(p) if p in {d.metadata['Name'] for d in m.distributions()} else '-'\n"
                                "print(torch.__version__, v('ray'))"],
                               capture_output=True, text=True).stdout.split()
        self.r["env"] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu,
            "cores": os.cpu_count(), "mem_gib": mem, "kernel": platform.release(),
            "mpi": (mpi.splitlines() or ["?"])[0], "dtrain": git,
            "torch": peers[0] if peers else "?", "ray": peers[1] if len(peers) > 1 else "?",
            "load_before": os.getloadavg()[0]}

    # ---- 1-3: ResNet-152 formations ----------------------------------------------------------

    def cfg(self, name, workers, steps, log_every, extra=()):
        a = self.a
        if a.image == 224:  # the seed's workload: photos, stock stem, crops decoded in the loader
            data = [os.path.join(REPO, "examples", "resnet152-imagenet.yaml"),
                    f"data.train={self.photos}/train", "data.val=", "model.num_classes=4",
                    "data.workers=1"]
        else:
            data = [os.path.join(REPO, "examples", "resnet152.yaml"),
                    f"data.train={self.fm}/train", "data.val=", "model.in_channels=1",
                    "data.image_size=28", "data.augment=false"]
        return [*data, f"model.depth={a.depth}", f"data.batch={a.batch}", "train.epochs=0", f"train.steps={steps}",
                f"train.log_every={log_every}", "schedule.warmup_steps=1",
                "train.threads=1", "ckpt.every_steps=0", "ckpt.resume=never",
                f"output.dir={self.runs}", f"output.run_name={name}",
                "output.experiment=evaluate-resnet", "train.progress=off", *extra]

    def parse_train(self, text, name):
        """Steady throughput: the logged intervals after the first (which pays for first-touch
        page faults and oneDNN's primitive creation). The step lines round img/s to whole
        images (a few per second here), so the rates and data-wait come from the experiment
        store's samples_per_s and data_wait where it has them."""
        rates = [float(x) for x in re.findall(r"^(?:\[w0\] )?step .* (\d+) img/s", text, re.M)]
        waits = [float(x) for x in re.findall(r"data-wait ([\d.]+)%", text)]
        m = self.metrics(name)
        if m.get("samples_per_s"):
            rates = m["samples_per_s"]
            waits = [100 * w for w in m.get("data_wait", [])] or waits
        comm = [float(x) for x in re.findall(r"comm-wait ([\d.]+)%", text)]
        ck = re.findall(r"committed: ([\d.]+) MB in ([\d.]+) s \(([\d.]+) MB/s\)", text)
        steady = rates[1:] or rates
        ips = sum(steady) / len(steady) if steady else 0
        return {"img_per_s": ips, "s_per_slice": self.a.images / ips if ips else 0,
                "data_wait_pct": waits[-1] if waits else 0,
                "comm_wait_pct": sum(comm[1:] or comm) / len(comm[1:] or comm) if comm else None,
                "ckpt_mb": float(ck[-1][0]) if ck else 0,
                "ckpt_s": float(ck[-1][1]) if ck else 0,
                "ckpt_mbps": float(ck[-1][2]) if ck else 0}

    def metrics(self, name):
        """{key: [values in step order]} of evaluate-resnet/NAME's newest attempt, from
        `dtrain runs export --format csv` (key,step,wall,value,attempt); {} when not there."""
        csv = os.path.join(self.work, f"metrics-{name}.csv")
        p = subprocess.run([self.dtrain, "runs", "export", f"evaluate-resnet/{name}", "--format",
                            "csv", "-o", csv, "--db", os.path.join(self.runs, "dtrain.db")],
                           capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(csv):
            return {}
        rows = [l.strip().split(",") for l in open(csv)][1:]
        out = {}
        for key, step, _, value, attempt in sorted((r for r in rows if len(r) == 5),
                                                    key=lambda r: (int(r[4]), int(r[1]))):
            out.setdefault(key, []).append(float(value))
        return out

    def run_id(self, name):
        out = subprocess.run([self.dtrain, "runs", "show", f"evaluate-resnet/{name}", "--db",
                              os.path.join(self.runs, "dtrain.db")], capture_output=True,
                             text=True).stdout
        m = re.match(r"run (\d+):", out)
        return int(m.group(1)) if m else None

    def loader_cmd(self):
        """The loading benchmark for the formations' dataset, and its per-copy figure's pattern:
        bench_data (1 prefetch thread, no augmentation) on Fashion-MNIST; bench_loader (decode +
        RandomResizedCrop(224) + flip, 1 thread, 3 s) on the photos."""
        if self.a.image == 224:
            return ([self.bench_loader, f"{self.photos}/train", "1", "3"],
                    r"dtrain loader \(dct_scaling on, 1 thread\): ([\d.]+) images/s")
        return ([self.bench_data, "--dataset", f"{self.fm}/train", "--epochs", "2"],
                r"loader\s+threads 1\s+augment 0\s+(\d+) samples/s")

    def loader(self, prefix, n):
        """The loading benchmark as n concurrent copies, placed by `prefix` (mpirun, or the
        namespaces' mpirun); returns total samples/s."""
        cmd, pattern = self.loader_cmd()
        _, text = run(prefix + cmd, self.log(f"loader-{n}-{len(prefix)}"))
        v = [float(x) for x in re.findall(pattern, text)]
        return sum(v) if len(v) == n else 0

    def formations(self):
        a = self.a
        spw = lambda w: max(2, a.images // (a.batch * w))  # steps per epoch-slice
        forms = [("1x1", "1 host x 1 worker", 1, []), ("1x2", "1 host x 2 workers", 2, MPIRUN + ["-np", "2"])]
        for key, label, w, prefix in forms:
            name = f"f{key}"
            say(f"ResNet-{a.depth}, {label}: {a.images} images, batch {a.batch} per worker")
            dt, text = run(prefix + [self.dtrain, "train"] + self.cfg(name, w, spw(w), max(1, spw(w) // 4)),
                           self.log(name))
            f = self.parse_train(text, name)
            m = re.search(r"resnet, (\d+) parameters", text)
            self.r["params"] = int(m.group(1)) if m else 0
            f.update(label=label, workers=w, wall_s=dt, run=self.run_id(name),
                     loader=self.loader(prefix, w))
            self.r["formations"][key] = f
            say(f"  {f['s_per_slice']:.1f} s per slice ({f['img_per_s']:.1f} img/s), checkpoint {f['ckpt_mbps']:.0f} MB/s")
        self.netns_formation(spw(2))

    def netns_formation(self, steps=None):
        """2 hosts x 1 worker: tests/dist/netns/netns_lib.sh's namespaces (root needed)."""
        a = self.a
        steps = steps or max(2, a.images // (a.batch * 2))
        say(f"ResNet-{a.depth}, 2 hosts x 1 worker (network namespaces, veth)")
        script = os.path.join(self.work, "netns_run.sh")
        args = " ".join(f"'{x}'" for x in self.cfg("f2x1", 2, steps, max(1, steps // 4)))
        with open(script, "w") as f:
            f.write(f"""#!/bin/sh
MPIRUN=mpirun
NETNS_TAG=evaluate
. {REPO}/tests/dist/netns/netns_lib.sh
NETNS_DIR={REPO}/tests/dist/netns
netns_up 2
netns_mpirun 3000 -x OMP_NUM_THREADS -x GOMP_SPINCOUNT -x DT_NETNS_PREFIX {self.dtrain} train {args} || exit 1
echo "== loader"
netns_mpirun 600 {" ".join(self.loader_cmd()[0])}
""")
        os.chmod(script, 0o755)
        note(["sh", script, "#", open(script).read().replace("\n", " ; ")])
        t0 = time.time()
        p = subprocess.run(["sh", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=ENV, text=True, errors="replace")
        open(self.log("f2x1"), "w").write(p.stdout)
        if p.returncode == 77:
            say("  skipped: no permission to create network namespaces")
            return
        if p.returncode != 0:
            sys.exit(f"evaluate: the 2-host run failed; see {self.log('f2x1')}\n{p.stdout[-3000:]}")
        train, _, loader = p.stdout.partition("== loader")
        f = self.parse_train(train, "f2x1")
        v = [float(x) for x in re.findall(self.loader_cmd()[1], loader)]
        f.update(label="2 hosts x 1 worker", workers=2, wall_s=time.time() - t0,
                 run=self.run_id("f2x1"), loader=sum(v))
        self.r["formations"]["2x1"] = f
        say(f"  {f['s_per_slice']:.1f} s per slice ({f['img_per_s']:.1f} img/s)")

    # ---- recovery: a killed worker under dtrain launch ------------------------------------

    def recovery(self):
        """2 slices on 1 host x 2 workers under `dtrain launch`, a checkpoint after the first;
        one worker SIGKILLed right after that commit. Recovery time: kill -> the first step
        line after the restart (log_every 1)."""
        a = self.a
        steps = max(2, a.images // (a.batch * 2))
        name = "recover"
        cfg = self.cfg(name, 2, 2 * steps, 1, [f"ckpt.every_steps={steps}", "ckpt.resume=auto"])
        st = {"kill": None, "back": None, "save": None}

        def on_line(t, line, p):
            m = re.search(r"committed: ([\d.]+) MB in ([\d.]+) s", line)
            if m and st["save"] is None:
                st["save"] = float(m.group(2))
            if st["kill"] is None and f"checkpoint step {steps} committed" in line:
                pid = subprocess.run(["pgrep", "-n", "-f", f"dtrain train .*output.run_name={name}"],
                                     capture_output=True, text=True).stdout.strip()
                if pid:
                    os.kill(int(pid), signal.SIGKILL)
                    st["kill"] = t
            elif st["kill"] and st["back"] is None and re.search(rf"step\s+{steps + 1}/", line):
                st["back"] = t

        say("recovery: dtrain launch, one worker killed after the first slice's checkpoint")
        rc, dt = run_lines([self.dtrain, "launch", "-n", "2", "--threads-per-worker", "1",
                            "--oversubscribe"] + cfg, self.log(name), on_line)
        if rc != 0 or not st["kill"] or not st["back"]:
            sys.exit(f"evaluate: the recovery run failed (exit {rc}); see {self.log(name)}")
        self.r["recovery"] = {"recover_s": st["back"] - st["kill"], "save_s": st["save"],
                              "wall_s": dt, "run": self.run_id(name)}
        say(f"  recovered in {self.r['recovery']['recover_s']:.1f} s")

    # ---- 4: reliability ------------------------------------------------------------------

    def reliability(self):
        n, steps, every = (2, 300, 50) if self.a.quick else (3, 600, 100)
        for i in range(n):
            name = f"reliability-{i + 1}"
            kills = []

            def on_line(t, line, p, kills=kills, name=name):
                m = re.search(r"checkpoint step (\d+) committed", line)
                if m and int(m.group(1)) in (2 * every, 4 * every) and int(m.group(1)) not in kills:
                    pid = subprocess.run(["pgrep", "-n", "-f", f"dtrain train .*output.run_name={name}"],
                                         capture_output=True, text=True).stdout.strip()
                    if pid:
                        time.sleep(0.5)  # a few steps past the checkpoint: they are lost
                        os.kill(int(pid), signal.SIGKILL)
                        kills.append(int(m.group(1)))

            cfg = [os.path.join(REPO, "examples", "resnet18-fmnist.yaml"),
                   f"data.train={self.fm}/train", "data.val=", "model.width=8", "data.batch=64",
                   "data.augment=false", "train.epochs=0", f"train.steps={steps}",
                   "train.log_every=1", "schedule.warmup_steps=20", f"ckpt.every_steps={every}",
                   f"output.dir={self.runs}", f"output.run_name={name}",
                   "output.experiment=evaluate-reliability", "train.progress=off"]
            say(f"reliability run {i + 1}/{n}: {steps} steps, checkpoint every {every}, 2 kills")
            rc, dt = run_lines([self.dtrain, "launch", "-n", "2", "--threads-per-worker", "1",
                                "--oversubscribe", "--max-failures", "3"] + cfg,
                               self.log(name), on_line)
            rec = json.load(open(os.path.join(self.runs, "evaluate-reliability", name,
                                              "launch.json")))
            att = rec.get("attempts", [])
            # steps trained again after each failure: the last step reached minus the step the
            # next attempt resumed from (a checkpoint commits a step or two after its snapshot)
            lost = [max(0, p["last_step"] - n["resumed_from_step"]) for p, n in zip(att, att[1:])]
            self.r["reliability"].append({"name": name, "exit": rc, "status": rec.get("status"),
                                          "attempts": len(att), "kills": len(kills),
                                          "lost": lost, "every": every, "steps": steps,
                                          "last_step": att[-1]["last_step"] if att else 0,
                                          "wall_s": dt, "run": self.run_id_exp("evaluate-reliability", name)})

    # ---- 5: LoRA ------------------------------------------------------------------------------

    def lora(self):
        d = os.path.join(self.work, "lora")
        say("LoRA: make lora-demo (pretrain a small Llama on fortunes, LoRA-finetune on 2 workers)")
        env = dict(ENV, LORA_DEMO_DIR=d)
        if self.a.quick:
            env["LORA_DEMO_STEPS"] = "30"
        run([os.path.join(REPO, "scripts", "lora_demo.sh"), os.path.abspath(self.a.build)],
            self.log("lora"), env=env)
        summ = dict(l.strip().split("=", 1) for l in open(os.path.join(d, "summary.txt")) if "=" in l)
        mem = ""
        for f in sorted(os.listdir(d)):
            if f.endswith(".log") and "finetune" in f:
                m = re.findall(r"memory per worker: .*", open(os.path.join(d, f)).read())
                mem = m[-1] if m else mem
        self.r["lora"] = {"summary": summ, "memory": mem}
        rows = []
        for n in (1, 2, 4, 8, 16, 32, 64):
            row = {"workers": n}
            for z in (0, 3):
                out = subprocess.run([self.dtrain, "plan", os.path.join(REPO, "examples", "llama3.1-8b-lora.yaml"),
                                      "-n", str(n), f"dist.zero_stage={z}"], capture_output=True, text=True).stdout
                m = re.search(r"^\s*total\s+([\d.]+)", out, re.M)
                row[f"zero{z}"] = float(m.group(1)) if m else None
            rows.append(row)
        self.r["plan"] = rows

    # ---- 6: peers: PyTorch DDP and Ray Train ---------------------------------------------------

    def peers(self):
        """bench/peers/ray_resnet.py: the same model, optimizer, batch and data in PyTorch (DDP
        over gloo, 1 and 2 workers) and in Ray Train (2 workers, a worker killed in the second
        slice). Throughput: its steady steps (after the first), as for dtrain. --image 224: the
        photos' JPEGs through torchvision's ImageFolder and transforms (--photos)."""
        a = self.a
        script = os.path.join(REPO, "bench", "peers", "ray_resnet.py")
        store = os.path.join(self.work, "peer-storage")
        data = ["--photos", self.jpegs] if a.image == 224 else ["--data", self.fm]
        common = [*data, "--images", str(a.images), "--batch", str(a.batch),
                  "--threads", "1", "--depth", str(a.depth), "--storage", store]
        runs = [("torch-1", ["--no-ray", "--workers", "1", "--slices", "1"]),
                ("torch-2", ["--no-ray", "--workers", "2", "--slices", "1"]),
                ("ray-2", ["--workers", "2", "--kill-after-slice"])]
        for key, extra in (r for r in runs if r[0] in a.peers.split(",")):
            out = os.path.join(self.work, f"{key}.json")
            say(f"peer {key}: {' '.join(extra)}")
            shutil.rmtree(store, ignore_errors=True)  # ~0.5 GB per ResNet-152 checkpoint
            run([VENV_PY, script, *common, *extra, "--out", out], self.log(key), timeout=5400)
            p = json.load(open(out))
            ips = p.get("steady_img_per_s") or p.get("img_per_s") or 0
            p["s_per_slice"] = a.images / ips if ips else 0
            p["img_per_s"] = ips
            p["ckpt_save_s"] = p.get("checkpoint_save_s", 0)
            p["recover_s"] = (p.get("recovery") or {}).get("recover_s", 0)
            self.r["peers"][key] = p
            say(f"  {p['s_per_slice']:.1f} s per slice ({ips:.2f} img/s)")
        shutil.rmtree(store, ignore_errors=True)

    def run_id_exp(self, exp, name):
        out = subprocess.run([self.dtrain, "runs", "show", f"{exp}/{name}", "--db",
                              os.path.join(self.runs, "dtrain.db")], capture_output=True,
                             text=True).stdout
        m = re.match(r"run (\d+):", out)
        return int(m.group(1)) if m else None


# ---- the page ------------------------------------------------------------------------------

def svg_bars(path, title, unit, bars):
    """A horizontal bar chart: bars = [(label, value, colour)]."""
    w, lh, left, top = 720, 30, 230, 40
    h = top + lh * len(bars) + 40
    vmax = max([v for _, v, _ in bars if v] + [1e-9]) * 1.15
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="13">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    for i, (label, v, colour) in enumerate(bars):
        y = top + i * lh
        bw = (w - left - 80) * (v or 0) / vmax
        out.append(f'<text x="{left - 8}" y="{y + 18}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y + 4}" width="{bw:.1f}" height="{lh - 8}" fill="{colour}"/>')
        out.append(f'<text x="{left + bw + 6:.1f}" y="{y + 18}">{v:.1f} {unit}</text>'
                   if v else f'<text x="{left + 6}" y="{y + 18}">not run</text>')
    out.append(f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{top + lh * len(bars)}" stroke="#333"/>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def render(r, out, a):
    doc_dir = os.path.dirname(out)
    fig_dir = os.path.join(doc_dir, "evaluation")
    big = a.image == 224
    fig = "seconds_per_slice_224.svg" if big else "seconds_per_slice.svg"
    os.makedirs(fig_dir, exist_ok=True)
    e, F, P = r["env"], r["formations"], r["peers"]
    f1 = F.get("1x1", {})
    base = f1.get("s_per_slice") or 0
    L = [f"# Evaluation: the seed system's measurements, on dtrain" + (" (224x224 photos)" if big else ""),
         "",
         "The seed system is the prototype this project started from: Ray Train on Hopsworks "
         "(PyTorch workers orchestrated by Kubernetes, periodic checkpoint backups to the HopsFS "
         "file system), whose published evaluation measured ResNet-152 training across cluster "
         "formations, checkpoint save and recovery, and LoRA finetuning of Llama-3.1-8B with "
         "DeepSpeed ZeRO. This page re-runs those experiments with dtrain, scaled to one machine, "
         "and runs the same workload in PyTorch DDP and Ray Train beside it.",
         "",
         *([f"This page is `make evaluate EVAL_IMAGE=224`: the ResNet-152 tables (1-3 and 6, "
            f"with the PyTorch DDP and Ray Train peers) at the seed's 224x224 on the photo "
            f"pipeline, with short runs ({a.images}-image slices, batch {a.batch}) that fit a "
            f"2-core machine; the reliability and LoRA parts are on "
            f"[evaluation.md](evaluation.md) (28x28).", ""]
           if big else
           ["The ResNet-152 tables at the seed's 224x224 on the photo pipeline (short runs): "
            "[evaluation-224.md](evaluation-224.md), `make evaluate EVAL_IMAGE=224`.", ""]),
         f"Generated by `make evaluate` (`scripts/evaluate.py`) on {e['date']} in "
         f"{r['total_s'] / 60:.0f} minutes; every number below comes from that run. Do not edit: "
         "run it again.",
         "",
         "| | |", "|---|---|",
         f"| machine | {e['cores']} cores ({e['cpu']}), {e['mem_gib']} GiB, Linux {e['kernel']}, no GPU |",
         f"| load average when it started | {e['load_before']:.2f}"
         + (f"; when it ended {e['load_after']:.2f}" if "load_after" in e else "") + " |",
         f"| dtrain | commit {e['dtrain']}; {e['mpi']} |",
         f"| peers | PyTorch {e['torch']}, Ray {e['ray']} (PyPI, in the reference venv) |",
         (f"| workload | ResNet-{a.depth} (stock stem: 7x7 stride-2 + max-pool; "
          f"{r.get('params', 0) / 1e6:.1f}M parameters) on 256 generated JPEGs (500x375 .. "
          f"1024x768, 4 classes) decoded in the loader with RandomResizedCrop(224) + flip "
          f"(1 prefetch thread, DCT-scaled decoding), batch {a.batch} per worker, SGD + momentum, "
          f"label smoothing 0.1, fp32, one thread per worker; an epoch-slice is {a.images} images |"
          if big else
          f"| workload | ResNet-{a.depth} (small-image stem: 3x3 stride-1 stem, no max-pool; "
          f"{r.get('params', 0) / 1e6:.1f}M parameters) on Fashion-MNIST 28x28, batch "
          f"{a.batch} per worker, SGD + Nesterov momentum, fp32, one thread per worker; an "
          f"epoch-slice is {a.images} images |"),
         "| experiment store | `WORK/runs/dtrain.db` (run ids below; WORK is `--work`: "
         f"`{'eval-out-224' if big else 'eval-out'}` under make) |", ""]
    # 1
    L += ["## 1. Seconds per epoch-slice across formations", "",
          "Throughput is the trainer's own, over the logged intervals after the first (which "
          "pays for first-touch page faults and primitive creation); seconds per slice = images "
          "/ throughput. Speedup and efficiency are against 1 host x 1 worker: efficiency = "
          "speedup / workers.", "",
          "| formation | s / slice | images/s | speedup | efficiency | comm-wait | data-wait | run |",
          "|---|---|---|---|---|---|---|---|"]
    for k in ("1x1", "1x2", "2x1"):
        f = F.get(k)
        if not f:
            L.append(f"| {k} | not run | | | | | | |")
            continue
        sp = base / f["s_per_slice"] if f["s_per_slice"] else 0
        cw = f"{f['comm_wait_pct']:.1f}%" if f.get("comm_wait_pct") is not None else "-"
        L.append(f"| {f['label']} | {f['s_per_slice']:.1f} | {f['img_per_s']:.2f} | {sp:.2f}x | "
                 f"{100 * sp / f['workers']:.0f}% | {cw} | {f['data_wait_pct']:.1f}% | {f['run']} |")
    bars = [(f"dtrain {F[k]['label']}", F[k]["s_per_slice"], "#1f77b4") for k in ("1x1", "1x2", "2x1") if k in F]
    for k, label in (("torch-1", "PyTorch 1 worker"), ("torch-2", "PyTorch DDP 2 workers"),
                     ("ray-2", "Ray Train 2 workers")):
        if k in P:
            bars.append((label, P[k].get("s_per_slice"), "#ff7f0e" if "torch" in k else "#2ca02c"))
    svg_bars(os.path.join(fig_dir, fig),
             f"ResNet-{a.depth}{', 224x224' if big else ''}, seconds per {a.images}-image slice "
             "(lower is better)", "s", bars)
    L += ["", f"![seconds per slice](evaluation/{fig})", ""]
    if P:
        L += ["The same workload in PyTorch (torchvision ResNet with the same stem, the same "
              "optimizer and batch, `torch.set_num_threads(1)` per worker; DDP over gloo) and "
              "in Ray Train (`TorchTrainer`, 2 CPU workers; bench/peers/ray_resnet.py)"
              + (": the same JPEGs through torchvision's `ImageFolder` and RandomResizedCrop(224) "
                 "+ flip in one DataLoader worker process per worker (Pillow decodes the whole "
                 "JPEG: no DCT scaling), label smoothing 0.1; a step includes the wait for its "
                 "batch (data-wait):" if big else ":"), "",
              "| | s / slice | images/s |" + (" data-wait |" if big else ""),
              "|---|---|---|" + ("---|" if big else "")]
        for k in ("torch-1", "torch-2", "ray-2"):
            if k in P:
                dw = P[k].get("data_wait_pct")
                row = f"| {k} | {P[k].get('s_per_slice', 0):.1f} | {P[k].get('img_per_s', 0):.2f} |"
                L.append(row + ((f" {dw:.1f}% |" if dw is not None else " - |") if big else ""))
        L.append("")
    # 2
    L += ["## 2. Data loading and checkpoint saving in each formation", "",
          ("Loading: bench_loader (decode + RandomResizedCrop(224) + flip + normalise, 1 prefetch "
           "thread, DCT-scaled decoding) " if big else
           "Loading: bench_data's loader (1 prefetch thread, shuffled records, no augmentation) ") +
          "run as one copy per worker of the formation, placed as the workers are; the total. "
          "Saving: the trainer's end-of-run checkpoint (weights + momentum, asynchronous, "
          "checksummed, committed), to the local ext4 disk.", "",
          "| formation | loading, samples/s (all workers) | checkpoint | save time | MB/s |",
          "|---|---|---|---|---|"]
    for k in ("1x1", "1x2", "2x1"):
        f = F.get(k)
        if f:
            ld = f"{f['loader']:.0f}" if big else f"{f['loader'] / 1e6:.1f} M"
            L.append(f"| {f['label']} | {ld} | {f['ckpt_mb']:.0f} MB | "
                     f"{f['ckpt_s']:.2f} s | {f['ckpt_mbps']:.0f} |")
    L.append("")
    # 3
    if "1x2" in F and "2x1" in F:
        o = F["2x1"]["s_per_slice"] / F["1x2"]["s_per_slice"] - 1
        L += ["", "## 3. Inter-node overhead", "",
              f"2 hosts x 1 worker against 1 host x 2 workers: {100 * o:+.1f}% seconds per slice "
              f"(the all-reduce crosses a veth link between network namespaces instead of shared "
              f"memory; comm-wait {F['2x1'].get('comm_wait_pct') or 0:.1f}% against "
              f"{F['1x2'].get('comm_wait_pct') or 0:.1f}%).", ""]
    # 4
    if r["reliability"]:
        L += ["## 4. Reliability: consecutive runs with injected failures", "",
              "Each run: `dtrain launch -n 2` of ResNet-18 (width 8), a worker SIGKILLed half a "
              "second after the 2nd and 4th checkpoint commits; the launcher restarts the job from "
              "the newest checkpoint. Steps lost per failure = the last step reached minus the "
              "step the next attempt resumed from.", "",
              "| run | steps | checkpoint every | kills | attempts | steps lost per failure | status | run id |",
              "|---|---|---|---|---|---|---|---|"]
        for x in r["reliability"]:
            L.append(f"| {x['name']} | {x['last_step']}/{x['steps']} | {x['every']} | {x['kills']} | "
                     f"{x['attempts']} | {', '.join(map(str, x['lost'])) or '-'} | {x['status']} | {x['run']} |")
        ok = all(x["status"] == "done" and x["last_step"] == x["steps"] and
                 all(l <= x["every"] for l in x["lost"]) for x in r["reliability"])
        L += ["", f"All completed, none lost more than its checkpoint interval: **{'yes' if ok else 'NO'}**.", ""]
    # 5
    lo = r.get("lora")
    if lo:
        s = lo["summary"]
        L += ["## 5. LoRA finetuning", "",
              "`make lora-demo`: a small Llama pretrained from scratch on Debian's fortunes, "
              "exported as a Hugging Face folder, then LoRA-finetuned on 2 workers on the "
              "held-out `definitions` instruction pairs.", "",
              "| | |", "|---|---|"]
        for k, v in s.items():
            L.append(f"| {k} | {v} |")
        L += [f"| memory | {lo['memory']} |", ""]
    if r.get("plan"):
        L += ["`dtrain plan examples/llama3.1-8b-lora.yaml -n N` (memory per worker, GiB; LoRA "
              "r=16 on the attention projections, bf16 base, recompute):", "",
              "| workers | " + " | ".join(str(x["workers"]) for x in r["plan"]) + " |",
              "|---|" + "---|" * len(r["plan"]),
              "| ZeRO 0 | " + " | ".join(f"{x['zero0']:.2f}" for x in r["plan"]) + " |",
              "| ZeRO 3 | " + " | ".join(f"{x['zero3']:.2f}" for x in r["plan"]) + " |", ""]
    # recovery vs Ray
    rec, ray = r.get("recovery"), P.get("ray-2")
    L += ["## 6. Against the seed's stack (Ray Train) on the same workload", ""]
    if big:
        L += ["Both sides on the photos at 224x224 (section 1's workload): dtrain under `dtrain "
              "launch -n 2`, Ray Train as `TorchTrainer` with 2 workers and "
              "`FailureConfig(max_failures=1)`; in each a worker is SIGKILLed after the first "
              "slice's checkpoint (bench/peers/ray_resnet.py --photos --kill-after-slice).", ""]
    if rec:
        rv = lambda k, fmt: fmt.format(ray.get(k, 0)) if ray else "not run"
        L += ["| | dtrain | Ray Train |", "|---|---|---|",
              f"| seconds per slice, 2 workers | {F.get('1x2', {}).get('s_per_slice', 0):.1f} | "
              f"{rv('s_per_slice', '{:.1f}')} |",
              f"| checkpoint save (weights + optimizer) | {rec['save_s']:.2f} s | "
              f"{rv('ckpt_save_s', '{:.2f} s')} |",
              f"| recovery from a killed worker (kill -> first step after restore) | "
              f"{rec['recover_s']:.1f} s | {rv('recover_s', '{:.1f} s')} |", ""]
    cmds = r.get("commands", [])
    if cmds:
        L += ["## Commands", "",
              "Every command this run started, in order (logs in `WORK/logs/`; WORK is the "
              "`--work` directory, `.` the repository, VENV the reference virtual environment, BUILD "
              "the `--build` directory when it is outside the repository):",
              "", "```"] + [portable(c, os.path.abspath(a.work), os.path.abspath(a.build)) for c in cmds] + ["```", ""]
    L += ["## What is measured, what is modelled, what a cluster must confirm", "",
          "- Measured here: everything above, on one 2-core VM. A worker is one core; the "
          "\"hosts\" of the 2-host formation are network namespaces on the same VM joined by a "
          "veth link, so MPI traffic crosses a real network interface and TCP stack, but the "
          "link is memory-speed and the two hosts share the cores, memory bus and disk.",
          "- Modelled, not measured: scaling beyond 2 workers and on real networks "
          "(`docs/scaling.md`: an alpha-beta model of ring all-reduce fed with our measured "
          "compute time and bandwidth).",
          "- A real cluster must confirm: the all-reduce bandwidth and latency of its links, "
          "storage throughput of its shared file system or object store under N concurrent "
          "writers, and recovery time when a whole node (not a process) is lost.", *(
              [f"- At 224x224 the runs are short ({a.images}-image slices: "
               f"{max(2, a.images // a.batch)} steps on 1 worker, {max(2, a.images // (2 * a.batch))} "
               "on 2), so each throughput rests on one to a few logged intervals, and on a shared "
               "machine other jobs' load (the load average above) can dominate the comparison "
               "between formations; the photos are generated, not ImageNet's, and the model has 4 "
               "classes instead of 1000 (the same cost but for the last layer)."] if big else []), ""]
    open(out, "w").write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="eval-out")
    ap.add_argument("--out", help="default docs/evaluation.md (--image 224: docs/evaluation-224.md)")
    ap.add_argument("--image", type=int, choices=(28, 224), default=28,
                    help="28: Fashion-MNIST, small stem; 224: photos, stock stem, parts 1-3 and 6")
    ap.add_argument("--images", type=int, help="images per epoch-slice (default 768; 224: 64)")
    ap.add_argument("--batch", type=int, help="per worker (default 32; 224: 8)")
    ap.add_argument("--depth", type=int, default=152)
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny slices")
    ap.add_argument("--only", default="", help="comma list of parts (for debugging)")
    ap.add_argument("--peers", default="torch-1,torch-2,ray-2",
                    help="part 6's peer runs, a comma list (tests without Ray: torch-1,torch-2)")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite the page from WORK/evaluation.json (no measuring)")
    a = ap.parse_args()
    big = a.image == 224
    a.images = a.images or (64 if big else 768)
    a.batch = a.batch or (8 if big else 32)
    a.out = a.out or os.path.join(REPO, "docs", "evaluation-224.md" if big else "evaluation.md")
    if a.render_only:
        render(json.load(open(os.path.join(a.work, "evaluation.json"))), a.out, a)
        return
    t0 = time.time()
    e = Eval(a)
    e.prepare()
    parts = a.only.split(",") if a.only else ["formations", "recovery", "peers"] if big else \
        ["formations", "recovery", "reliability", "peers", "lora"]
    for p in parts:
        getattr(e, p)()
    e.r["total_s"] = time.time() - t0
    e.r["env"]["load_after"] = os.getloadavg()[0]  # other jobs on a shared machine show here
    e.r["commands"] = COMMANDS
    json.dump(e.r, open(os.path.join(e.work, "evaluation.json"), "w"), indent=1)
    if not a.only:
        render(e.r, a.out, a)
        say(f"wrote {a.out}")
    say(f"done in {e.r['total_s'] / 60:.1f} min; results in {e.work}/evaluation.json")


if __name__ == "__main__":
    main()

"""Cases of mlflow_server.py (which starts the server, runs them and reads back with MLflow's
client): a run's artefacts, a registered model version and its alias, the attempts of a run.

  artifacts      a run with output.export=true: its MLflow artefacts (config.yaml, run.json,
                 model/*, dtrain-manifest.tsv), downloaded with MlflowClient, are byte-identical
                 to the run folder's files; the manifest names each with its size; every upload
                 was a PUT through the artifact proxy. A second attempt of the run (resumed, more
                 steps): tag dtrain.attempt 2, metric `attempt` 1 then 2, as the SQLite store
                 counts attempts
  upload-outage  the proxy answers 503 to every artefact PUT: training finishes (exit 0), the
                 uploads are pending in the run's spool and absent on the server; `dtrain runs
                 sync` uploads them (byte-identical) and removes the spool; a replay of a copy
                 overwrites them harmlessly
  launch         `dtrain launch` with no data (workers never reach the server): the launcher
                 creates the MLflow run, tags dtrain.attempt.1.status failed and its reason,
                 FAILED; launched again with data: attempt 2 done, FINISHED, as in SQLite
  registry       `dtrain models register` of a run tracked to MLflow: an MLflow model version
                 whose run_id is the run's, whose source is the run's artifact_uri +
                 /checkpoints/step-N holding the checkpoint's files byte for byte, tagged
                 dtrain.version; `models alias` sets the MLflow alias on it, `alias --remove`
                 deletes it; registering while the server refuses everything: exit 0, one
                 warning, spooled; `runs sync` creates the version (tag dtrain.version 2)
  models-sync    versions and aliases made while the run was tracked to SQLite only (nothing in
                 MLflow): `dtrain models sync NAME --mlflow URL --json` creates the MLflow run
                 (FINISHED), both versions (tags dtrain.version 1 and 2, sources holding the
                 checkpoints' files byte for byte) and both aliases on the right versions; a
                 second sync sends nothing and duplicates nothing; an alias moved in SQLite is
                 moved in MLflow by the next sync; without --mlflow the versions are skipped; to
                 an address where nothing listens: exit 1, both failed, nothing spooled
"""
import filecmp
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile

import mlflow_server as ms


def downloaded(client, run_id, path, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    return client.download_artifacts(run_id, path, d)


def same_files(client, run_id, local_dir, artifact_dir, tmp, names):
    got = downloaded(client, run_id, artifact_dir, tmp)
    for n in names:
        a, b = os.path.join(local_dir, n), os.path.join(got, n)
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            ms.fail("artefact %s/%s is not byte-identical to %s" % (artifact_dir, n, a))


def listed(client, run_id, path=None):
    return sorted(a.path for a in client.list_artifacts(run_id, path))


def check_run_artifacts(client, run, rdir, tmp):
    top = listed(client, run.info.run_id)
    want = ["config.yaml", "dtrain-manifest.tsv", "model", "run.json"]
    if top != want:
        ms.fail("artefacts %s, expected %s" % (top, want))
    model = sorted(os.path.basename(p) for p in listed(client, run.info.run_id, "model"))
    if model != sorted(os.listdir(os.path.join(rdir, "model"))):
        ms.fail("model artefacts %s, the export has %s" % (model, os.listdir(rdir + "/model")))
    same_files(client, run.info.run_id, os.path.join(rdir, "model"), "model", tmp, model)
    for f in ("config.yaml", "run.json"):
        if not filecmp.cmp(downloaded(client, run.info.run_id, f, tmp), os.path.join(rdir, f),
                           shallow=False):
            ms.fail("%s differs from the run folder's" % f)
    man = open(downloaded(client, run.info.run_id, "dtrain-manifest.tsv", tmp)).read().splitlines()
    rows = {l.split("\t")[0]: l.split("\t") for l in man[1:]}
    if man[0] != "path\tbytes\txxh3" or sorted(rows) != sorted(
            ["config.yaml", "run.json"] + ["model/" + m for m in model]):
        ms.fail("manifest: %s" % man)
    for p, row in rows.items():
        if int(row[1]) != os.path.getsize(os.path.join(rdir, p)) or len(row[2]) != 16:
            ms.fail("manifest row %s: size or hash wrong" % row)
    return model


def run(case, client, proxy, dtrain, repo, data, out, exp, url):
    tmp = tempfile.mkdtemp(prefix="dt-mlflow-art-")
    try:
        pid = os.getpid()
        if case == "artifacts":
            name = "art-%d" % pid
            err = ms.train(dtrain, repo, data, out, name, proxy.url, steps=6,
                           extra=["output.export=true", "ckpt.every_steps=3"])
            if ms.mlflow_lines(err) or "warning" in err:
                ms.fail("a warning on a healthy server: %s" % err)
            r = ms.remote(client, name)
            rdir = os.path.join(out, exp, name)
            model = check_run_artifacts(client, r, rdir, tmp)
            puts = [p for p, h, b in proxy.log if "/mlflow-artifacts/artifacts/" in p]
            if len(puts) != len(model) + 3:
                ms.fail("%d artefact requests, expected %d" % (len(puts), len(model) + 3))
            print("artifacts: %d files byte-identical, manifest complete" % (len(model) + 2))
            # a second attempt (resumed from step 6's checkpoint, 9 steps)
            ms.train(dtrain, repo, data, out, name, proxy.url, steps=9,
                     extra=["output.export=true", "ckpt.every_steps=3"])
            r = ms.remote(client, name)
            db = sqlite3.connect(os.path.join(out, "dtrain.db"))
            (attempts,) = db.execute("SELECT attempts FROM runs WHERE name = ?", (name,)).fetchone()
            hist = sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "attempt"))
            if attempts != 2 or r.data.tags.get("dtrain.attempt") != "2" or \
                    [v for s, v in hist] != [1.0, 2.0] or hist[1][0] != 6:
                ms.fail("attempts: store %d, tag %s, metric %s" % (
                    attempts, r.data.tags.get("dtrain.attempt"), hist))
            check_run_artifacts(client, r, rdir, tmp)  # the second attempt's files replace them
            print("attempts: tag dtrain.attempt 2, metric attempt [1, 2] as in SQLite")
        elif case == "upload-outage":
            name = "upout-%d" % pid
            proxy.refuse = lambda path, body: "/mlflow-artifacts/" in path
            err = ms.train(dtrain, repo, data, out, name, proxy.url, steps=4,
                           extra=["output.export=true"])
            proxy.refuse = lambda path, body: False
            if "runs sync" not in err:
                ms.fail("no line naming `runs sync`: %s" % err)
            rdir = os.path.join(out, exp, name)
            spool = os.path.join(rdir, "mlflow-spool.jsonl")
            ops = [json.loads(l) for l in open(spool)]
            if {o["op"] for o in ops} != {"upload"} or len(ops) != 3 + len(os.listdir(rdir + "/model")) \
                    or not all(os.path.isabs(o["file"]) for o in ops):
                ms.fail("spool: %s" % [o["op"] for o in ops])
            r = ms.remote(client, name)
            if listed(client, r.info.run_id) or r.info.status != "FINISHED":
                ms.fail("artefacts on the server during the outage, or not FINISHED")
            shutil.copy(spool, spool + ".copy")
            s = subprocess.run([dtrain, "runs", "sync", "--output-dir", out], capture_output=True, text=True)
            if s.returncode != 0 or os.path.exists(spool):
                ms.fail("runs sync: exit %d %s %s" % (s.returncode, s.stdout, s.stderr))
            check_run_artifacts(client, r, rdir, tmp)
            s = subprocess.run([dtrain, "runs", "sync", spool + ".copy"], capture_output=True, text=True)
            if s.returncode != 0:
                ms.fail("runs sync of the copy: %s" % s.stderr)
            check_run_artifacts(client, r, rdir, tmp)
            print("upload-outage: %d uploads spooled, sent by runs sync, identical" % len(ops))
        elif case == "registry":
            name, model = "reg-%d" % pid, "fortunes-%d" % pid
            ms.train(dtrain, repo, data, out, name, proxy.url, steps=6, extra=["ckpt.every_steps=6"])
            db = os.path.join(out, "dtrain.db")
            p = subprocess.run([dtrain, "models", "register", name, "--name", model, "--db", db,
                                "--json"], capture_output=True, text=True)
            if p.returncode != 0:
                ms.fail("models register: %s %s" % (p.stdout, p.stderr))
            v = json.loads(p.stdout)
            if v["mlflow"]["status"] != "sent" or v["mlflow"]["uri"] != proxy.url:
                ms.fail("register --json: %s" % v["mlflow"])
            r = ms.remote(client, name)
            mv = client.get_model_version(model, str(v["mlflow"]["version"]))
            folder = os.path.basename(v["path"])
            if mv.run_id != r.info.run_id or mv.source != r.info.artifact_uri + "/checkpoints/" + folder \
                    or mv.tags.get("dtrain.version") != "1" or mv.tags.get("dtrain.hash") != v["hash"]:
                ms.fail("model version: run %s source %s tags %s" % (mv.run_id, mv.source, mv.tags))
            names = [f["name"] for f in v["files"]]
            same_files(client, r.info.run_id, v["path"], "checkpoints/" + folder, tmp, names)
            print("registry: MLflow version %s of %s, source %s, %d files identical" %
                  (mv.version, model, mv.source, len(names)))
            p = subprocess.run([dtrain, "models", "alias", model, "1", "champion", "--db", db],
                               capture_output=True, text=True)
            if p.returncode != 0 or client.get_model_version_by_alias(model, "champion").version != mv.version:
                ms.fail("models alias: %s %s" % (p.stdout, p.stderr))
            p = subprocess.run([dtrain, "models", "alias", "--remove", model, "champion", "--db", db],
                               capture_output=True, text=True)
            if p.returncode != 0 or "champion" in client.get_registered_model(model).aliases:
                ms.fail("models alias --remove: %s %s" % (p.stdout, p.stderr))
            print("registry: alias set and removed in MLflow")
            # the server refusing everything while a second version is registered
            proxy.refuse = lambda path, body: True
            p = subprocess.run([dtrain, "models", "register", name, "--name", model, "--db", db],
                               capture_output=True, text=True)
            proxy.refuse = lambda path, body: False
            lines = p.stderr.strip().splitlines()
            if p.returncode != 0 or len(lines) != 1 or "runs sync" not in lines[0]:
                ms.fail("register during an outage: exit %d, %s" % (p.returncode, p.stderr))
            if len(client.search_model_versions("name='%s'" % model)) != 1:
                ms.fail("a version reached MLflow during the outage")
            s = subprocess.run([dtrain, "runs", "sync", "--output-dir", out], capture_output=True, text=True)
            if s.returncode != 0:
                ms.fail("runs sync: %s %s" % (s.stdout, s.stderr))
            vs = {x.tags.get("dtrain.version") for x in client.search_model_versions("name='%s'" % model)}
            if vs != {"1", "2"}:
                ms.fail("after runs sync, MLflow versions tagged %s" % vs)
            print("registry: a version registered during an outage reached MLflow by runs sync")
        elif case == "models-sync":
            name, model = "msync-%d" % pid, "before-%d" % pid
            ms.train(dtrain, repo, data, out, name, "", steps=4,
                     extra=["ckpt.every_steps=2", "ckpt.keep_last=0"])
            db = os.path.join(out, "dtrain.db")
            ck = os.path.join(out, exp, name, "checkpoints")

            def models(*args):
                p = subprocess.run([dtrain, "models"] + list(args) + ["--db", db],
                                   capture_output=True, text=True, timeout=60)
                if p.returncode != 0:
                    ms.fail("models %s: exit %d %s %s" % (args, p.returncode, p.stdout, p.stderr))
                return p
            models("register", os.path.join(ck, "step-000000002"), "--name", model)
            models("register", name, "--name", model)
            models("alias", model, "1", "champion")
            models("alias", model, "2", "prod")
            if client.search_model_versions("name='%s'" % model):
                ms.fail("a version reached MLflow before any sync")
            p = models("sync", model, "--json")  # no --mlflow: the run never saw MLflow
            j = json.loads(p.stdout)
            if j["skipped"] != 2 or j["sent"] or client.search_model_versions("name='%s'" % model):
                ms.fail("sync without --mlflow: %s" % j)
            p = subprocess.run([dtrain, "models", "sync", model, "--mlflow", "http://127.0.0.1:9",
                                "--db", db, "--json"], capture_output=True, text=True, timeout=60)
            j = json.loads(p.stdout)
            if p.returncode != 1 or j["failed"] != 2 or j["spooled"] or \
                    os.path.exists(os.path.join(out, exp, name, "mlflow-spool.jsonl")):
                ms.fail("sync to a dead address: exit %d %s" % (p.returncode, j))
            j = json.loads(models("sync", model, "--mlflow", proxy.url, "--json").stdout)
            vs = {v["version"]: v for v in j["versions"]}
            if j["sent"] != 2 or j["aliases_sent"] != 2 or j["failed"] or \
                    [vs[1]["run_created"], vs[2]["run_created"]] != [True, False]:
                ms.fail("first sync: %s" % j)
            r = ms.remote(client, name)
            if r.info.status != "FINISHED":
                ms.fail("the created run is %s" % r.info.status)
            reg = json.loads(models("ls", model, "--json").stdout)["versions"]
            for v in reg:
                mv = client.get_model_version(model, str(vs[v["version"]]["mlflow_version"]))
                folder = os.path.basename(v["path"])
                if mv.tags.get("dtrain.version") != str(v["version"]) or mv.run_id != r.info.run_id \
                        or mv.source != r.info.artifact_uri + "/checkpoints/" + folder \
                        or mv.tags.get("dtrain.hash") != v["hash"]:
                    ms.fail("version %d: %s %s %s" % (v["version"], mv.tags, mv.run_id, mv.source))
                same_files(client, r.info.run_id, v["path"], "checkpoints/" + folder, tmp,
                           [f["name"] for f in v["files"]])

            def aliases():
                return {a: client.get_model_version_by_alias(model, a).tags.get("dtrain.version")
                        for a in client.get_registered_model(model).aliases}
            if aliases() != {"champion": "1", "prod": "2"}:
                ms.fail("aliases after sync: %s" % aliases())
            print("models-sync: 2 versions (files identical) and 2 aliases sent, run created")
            j = json.loads(models("sync", model, "--mlflow", proxy.url, "--json").stdout)
            if j["sent"] or j["present"] != 2 or j["aliases_sent"] or \
                    len(client.search_model_versions("name='%s'" % model)) != 2:
                ms.fail("second sync: %s" % j)
            models("alias", model, "1", "prod")
            j = json.loads(models("sync", model, "--mlflow", proxy.url, "--json").stdout)
            if j["sent"] or j["aliases_sent"] != 1 or aliases() != {"champion": "1", "prod": "1"}:
                ms.fail("sync of a moved alias: %s %s" % (j, aliases()))
            print("models-sync: a second sync sends nothing; a moved alias moves in MLflow")
        elif case == "launch":
            # the launcher's attempt records: a data error (no worker reaches the server, so
            # only the launcher can tell MLflow), then a job that trains to the end
            name = "launch-%d" % pid
            args = [dtrain, "launch", "-n", "1", "--backoff", "0.2", "--max-failures", "-1",
                    os.path.join(repo, "examples/llama-tiny-fortunes.yaml"),
                    "data.train=" + os.path.join(tmp, "nope"), "data.val=", "data.seq_len=32",
                    "data.batch=4", "train.threads=1", "train.steps=4", "train.log_every=2",
                    "schedule.warmup_steps=2",
                    "output.export=false", "output.dir=" + out, "output.run_name=" + name,
                    "tracking.uri=" + proxy.url]
            p = subprocess.run(args, capture_output=True, text=True, timeout=120)
            if p.returncode != 1:
                ms.fail("launch with no data: exit %d %s" % (p.returncode, p.stderr[-2000:]))
            r = ms.remote(client, name)
            t = r.data.tags
            if r.info.status != "FAILED" or t.get("dtrain.attempt.1.status") != "failed" or \
                    "not retried" not in t.get("dtrain.attempt.1.reason", "") or \
                    t.get("dtrain.restarts") != "0":
                ms.fail("launcher's attempt on MLflow: %s %s" % (r.info.status, t))
            args[args.index("data.train=" + os.path.join(tmp, "nope"))] = \
                "data.train=%s/fortunes/train" % data
            p = subprocess.run(args, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                ms.fail("launch: exit %d %s" % (p.returncode, p.stderr[-2000:]))
            r = ms.remote(client, name)
            t = r.data.tags
            db = sqlite3.connect(os.path.join(out, "dtrain.db"))
            st = [s for (s,) in db.execute(
                "SELECT a.status FROM attempts a JOIN runs r ON r.id = a.run_id WHERE r.name = ?"
                " ORDER BY a.attempt", (name,))]
            hist = [m.value for m in client.get_metric_history(r.info.run_id, "attempt")]
            if st != ["failed", "done"] or r.info.status != "FINISHED" or \
                    t.get("dtrain.attempt.2.status") != "done" or t.get("dtrain.attempt") != "2" \
                    or hist != [2.0]:
                ms.fail("second launch: store %s, MLflow %s %s, attempt metric %s" % (
                    st, r.info.status, t, hist))
            print("launch: attempts %s on MLflow as in SQLite" % st)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

#!/usr/bin/env python3
"""tracking.uri: http://... end to end: real `dtrain train` runs of the tiny Llama log to a real
`mlflow server` (PyPI's mlflow, in the test venv; exit 77 without it), read back with MLflow's
own client (MlflowClient) and compared with the run's SQLite record (the local store, written
beside it).

  mlflow_server.py start STATE_DIR             the server (sqlite backend in STATE_DIR) on a free
                                               port, detached; a watchdog kills it after 20 min
  mlflow_server.py stop STATE_DIR              kills it and removes STATE_DIR
  mlflow_server.py DTRAIN REPO DATA STATE_DIR CASE
  CASE logged   a run through a proxy that records every request: params equal the SQLite
                store's, every metric step present once with the same value, status FINISHED,
                lineage as dtrain.* tags, log-batch requests within MLflow's limits; the same
                run again with MLFLOW_TRACKING_TOKEN (every request carries the bearer token),
                then with MLFLOW_TRACKING_USERNAME/PASSWORD (basic auth); a second attempt of
                a run with train.steps changed: the same MLflow run gets both attempts' values
                and ends FINISHED, train.steps keeps its first value, named in one warning
  CASE outage   the proxy answers 503 to every metrics batch with a step past 30 and to the
                run's end, until the run has ended: training finishes (exit 0) with one MLflow warning, the
                missing requests are in the run's spool; `dtrain runs sync` replays them (the
                spool is removed) and the client sees every metric once; replaying a copy of
                the spool again adds no duplicate
  CASE artifacts, upload-outage, registry, models-sync, launch   tests/track/mlflow_artifacts.py
  CASE down     tracking.uri an address where nothing listens, and a malformed one: training
                finishes (exit 0, the SQLite record complete) with one warning line about
                MLflow; the first run's spool, replayed with `runs sync --uri` to the real
                server, creates the run with all its metrics, FINISHED
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import sqlite3
import tempfile
import threading
import time
import urllib.request
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_harness import free_port  # noqa: E402

VENV_PY = os.environ.get("DT_VENV_PYTHON", os.path.expanduser("~/.cache/dtrain/venv/bin/python"))


def have_mlflow():
    # found, not imported (importing the server takes seconds)
    return os.path.exists(VENV_PY) and subprocess.run(
        [VENV_PY, "-c", "import importlib.util as u, sys;"
         " sys.exit(not (u.find_spec('mlflow') and u.find_spec('mlflow.server')))"],
        capture_output=True).returncode == 0


if os.path.realpath(sys.executable) != os.path.realpath(VENV_PY) and not os.environ.get("DT_REEXEC"):
    if not have_mlflow():
        print("SKIP: no mlflow in the test venv (%s)" % VENV_PY)
        sys.exit(77)
    os.environ["DT_REEXEC"] = "1"
    os.execv(VENV_PY, [VENV_PY] + sys.argv)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def health(url):
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(state):
    os.makedirs(state, exist_ok=True)
    port = free_port()
    log = open(os.path.join(state, "server.log"), "w")
    p = subprocess.Popen([os.path.join(os.path.dirname(VENV_PY), "mlflow"), "server",
                          "--backend-store-uri", "sqlite:///%s/mlflow.db" % state,
                          # artefacts through the server's proxy (runs get mlflow-artifacts:/
                          # URIs), as dtrain uploads them
                          "--serve-artifacts",
                          "--artifacts-destination", os.path.join(state, "artifacts"),
                          "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         # no job-runner processes (huey consumers), which these tests never
                         # use: a quicker start, and nothing left running beside the server
                         env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
    # never outlives the test run by long, even when `stop` is not reached
    dog = subprocess.Popen(["sh", "-c", "sleep 1200; kill -TERM -%d" % p.pid],
                           start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    t0 = time.time()
    while not health(url):
        if p.poll() is not None or time.time() - t0 > 150:
            print(open(os.path.join(state, "server.log")).read()[-3000:])
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            fail("mlflow server did not start")
        time.sleep(0.3)
    with open(os.path.join(state, "server.json"), "w") as f:
        json.dump({"url": url, "pgid": p.pid, "watchdog": dog.pid}, f)
    print("mlflow server %s up after %.1f s" % (url, time.time() - t0))


def stop(state):
    try:
        with open(os.path.join(state, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        info = {}
    for sig in (signal.SIGTERM, signal.SIGKILL):  # the server's group, then what is left
        for key in ("pgid", "watchdog"):
            try:
                if info.get(key):
                    os.killpg(info[key], sig)
            except OSError:
                pass
        time.sleep(2 if sig == signal.SIGTERM else 0)
    shutil.rmtree(state, ignore_errors=True)


class Proxy:
    """Forwards HTTP requests to the server, recording each (path, headers, JSON body); while
    `refuse(path, body)` says so, answers 503 instead."""

    def __init__(self, target):
        self.target, self.log, self.refuse = target, [], lambda path, body: False
        proxy = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def handle_one(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else None
                ctype = self.headers.get("Content-Type") or "application/json"
                body = json.loads(data) if data and "json" in ctype else None
                proxy.log.append((self.path, dict(self.headers), body))
                if proxy.refuse(self.path, body):
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                req = urllib.request.Request(proxy.target + self.path, data=data, method=method)
                req.add_header("Content-Type", ctype)
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        code, out = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, out = e.code, e.read()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self):
                self.handle_one("GET")

            def do_POST(self):
                self.handle_one("POST")

            def do_PUT(self):
                self.handle_one("PUT")

            def do_DELETE(self):
                self.handle_one("DELETE")

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


def train(dtrain, repo, data, out, name, uri, steps=20, env=None, extra=()):
    val = "data.val=%s/fortunes/val" % data if steps >= 10 else "data.val="
    args = [dtrain, "train", os.path.join(repo, "examples/llama-tiny-fortunes.yaml"),
            "data.train=%s/fortunes/train" % data, val,
            "data.seq_len=32", "data.batch=4", "train.threads=1", "schedule.warmup_steps=2",
            "train.log_every=2", "train.eval_every=10", "train.steps=%d" % steps,
            "output.export=false", "output.dir=" + out, "output.run_name=" + name,
            "tracking.uri=" + uri] + list(extra)
    e = dict(os.environ)
    for k in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        e.pop(k, None)
    e.update(env or {})
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True, env=e, timeout=120)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail("%s: dtrain train exited %d" % (name, p.returncode))
    print("%s: trained in %.1f s" % (name, time.time() - t0))
    return p.stderr


def local(out, name):
    """The run's SQLite record: params, {key: {step: value}}, lineage."""
    db = sqlite3.connect(os.path.join(out, "dtrain.db"))
    (run,) = db.execute("SELECT id FROM runs WHERE name = ?", (name,)).fetchone()
    params = dict(db.execute("SELECT key, value FROM params WHERE run_id = ?", (run,)))
    metrics = {}
    for k, s, v in db.execute("SELECT key, step, value FROM metrics WHERE run_id = ?", (run,)):
        metrics.setdefault(k, {})[s] = v
    lineage = dict(db.execute("SELECT key, value FROM lineage WHERE run_id = ?", (run,)))
    return params, metrics, lineage


def remote(client, name):
    from mlflow.entities import ViewType
    exps = client.search_experiments(view_type=ViewType.ALL)
    runs = [r for e in exps for r in client.search_runs([e.experiment_id], "attributes.run_name = '%s'" % name)]
    if len(runs) != 1:
        fail("%s: %d MLflow runs of that name, expected 1" % (name, len(runs)))
    return runs[0]


def check_same(client, out, name, want_status="FINISHED"):
    params, metrics, lineage = local(out, name)
    r = remote(client, name)
    if r.info.status != want_status:
        fail("%s: MLflow status %s, expected %s" % (name, r.info.status, want_status))
    if r.data.params != params:
        diff = set(r.data.params.items()) ^ set(params.items())
        fail("%s: params differ from the SQLite store's: %s" % (name, sorted(diff)[:6]))
    for k, v in lineage.items():
        if r.data.tags.get("dtrain." + k) != v:
            fail("%s: tag dtrain.%s = %r, lineage %r" % (name, k, r.data.tags.get("dtrain." + k), v))
    n = 0
    for key, steps in metrics.items():
        hist = client.get_metric_history(r.info.run_id, key)
        got = {}
        for m in hist:
            if m.step in got:
                fail("%s: metric %s step %d twice in MLflow" % (name, key, m.step))
            got[m.step] = m.value
        if got != steps:
            miss = sorted(set(steps) - set(got))
            bad = [s for s in steps if s in got and got[s] != steps[s]]
            fail("%s: metric %s: steps missing %s, values differing at %s" % (name, key, miss[:5], bad[:5]))
        n += len(hist)
    print("%s: %d params, %d metric values in %d keys, status %s: as in SQLite" %
          (name, len(params), n, len(metrics), r.info.status))
    return n


def mlflow_lines(stderr):
    return [l for l in stderr.splitlines() if "mlflow" in l.lower()]


def main():
    if sys.argv[1] == "start":
        return start(sys.argv[2])
    if sys.argv[1] == "stop":
        return stop(sys.argv[2])
    dtrain, repo, data, state, case = sys.argv[1:6]
    from mlflow.tracking import MlflowClient
    url = json.load(open(os.path.join(state, "server.json")))["url"]
    if not health(url):
        fail("the mlflow server at %s is not up (the fixture track_mlflow_server_start)" % url)
    client = MlflowClient(url)
    tmp = tempfile.mkdtemp(prefix="dt-mlflow-")
    try:
        out = os.path.join(tmp, "runs")
        proxy = Proxy(url)
        exp = "llama-tiny-fortunes"
        if case == "logged":
            name = "logged-%d" % os.getpid()
            err = train(dtrain, repo, data, out, name, proxy.url, steps=10)
            if mlflow_lines(err) or "warning" in err:
                fail("a warning on a healthy server: %s" % err)
            check_same(client, out, name)
            batches = [b for p, h, b in proxy.log if p.endswith("/runs/log-batch")]
            for b in batches:
                if len(b.get("metrics", [])) > 1000 or len(b.get("params", [])) > 100 or \
                        len(b.get("tags", [])) > 100:
                    fail("a log-batch over MLflow's limits")
            if sum(len(b.get("params", [])) for b in batches) != len(local(out, name)[0]):
                fail("params not sent exactly once")
            # auth: every request carries what the environment names
            for env, want in (({"MLFLOW_TRACKING_TOKEN": "tok-123"}, "Bearer tok-123"),
                              ({"MLFLOW_TRACKING_USERNAME": "ann", "MLFLOW_TRACKING_PASSWORD": "pw:1"},
                               "Basic " + base64.b64encode(b"ann:pw:1").decode())):
                proxy.log.clear()
                n2 = "%s-%s" % (name, want.split()[0].lower())
                train(dtrain, repo, data, out, n2, proxy.url, steps=4, env=env)
                auth = {h.get("Authorization") for p, h, b in proxy.log}
                if auth != {want} or not proxy.log:
                    fail("%s: Authorization headers %s, expected %r" % (n2, auth, want))
                if remote(client, n2).info.status != "FINISHED":
                    fail("%s: not FINISHED" % n2)
            print("auth: bearer and basic sent on every request")
            # a new attempt of a run (the same name again, more steps): the same MLflow run,
            # both attempts' values, FINISHED again, and one warning naming the changed param
            n2 = name + "-bearer"
            err = train(dtrain, repo, data, out, n2, proxy.url, steps=6)
            r = remote(client, n2)
            hist = client.get_metric_history(r.info.run_id, "loss")
            db = sqlite3.connect(os.path.join(out, "dtrain.db"))
            want, attempts = db.execute(
                "SELECT COUNT(*), MAX(m.attempt) FROM metrics m JOIN runs r ON r.id = m.run_id"
                " WHERE r.name = ? AND m.key = 'loss'", (n2,)).fetchone()
            if r.info.status != "FINISHED" or attempts != 2 or \
                    sorted((m.step, m.value) for m in hist) != sorted(db.execute(
                        "SELECT m.step, m.value FROM metrics m JOIN runs r ON r.id = m.run_id"
                        " WHERE r.name = ? AND m.key = 'loss'", (n2,))):
                fail("%s again: %s with %d loss values, expected FINISHED with the %d of both "
                     "attempts" % (n2, r.info.status, len(hist), want))
            lines = mlflow_lines(err)
            if len(lines) != 1 or "train.steps" not in lines[0] or r.data.params["train.steps"] != "4":
                fail("%s again: expected one warning naming train.steps (kept at 4): %s" % (n2, err))
            print("a second attempt continues the MLflow run; the changed param is named")
        elif case == "outage":
            name = "outage-%d" % os.getpid()
            seen = {"refused": 0}

            def refuse(path, body):
                # down from the first batch with a step past 30 (how many went through before
                # depends on the machine's speed: the sender batches every 2 s) to the run's end
                late = path.endswith("/runs/log-batch") and body and \
                    any(m["step"] >= 30 for m in body.get("metrics", []))
                if late or (seen["refused"] and path.endswith("/runs/update")):
                    seen["refused"] += 1
                    return True
                return False
            proxy.refuse = refuse
            err = train(dtrain, repo, data, out, name, proxy.url, steps=40)
            proxy.refuse = lambda path, body: False  # the server is back
            lines = mlflow_lines(err)
            if len(lines) < 1 or len(lines) > 2 or "runs sync" not in err:
                fail("expected one warning and one closing line about MLflow, got: %s" % err)
            spool = os.path.join(out, exp, name, "mlflow-spool.jsonl")
            if not os.path.exists(spool):
                fail("no spool at %s" % spool)
            params, metrics, _ = local(out, name)
            total = sum(len(v) for v in metrics.values())
            r = remote(client, name)
            have = sum(len(client.get_metric_history(r.info.run_id, k)) for k in metrics)
            if not have < total or r.info.status != "RUNNING":
                fail("during the outage the server should have part of the run (%d of %d, %s)" %
                     (have, total, r.info.status))
            print("outage: %d of %d metric values reached the server, the rest spooled" % (have, total))
            copy = spool + ".copy"
            shutil.copy(spool, copy)
            s = subprocess.run([dtrain, "runs", "sync", "--output-dir", out], capture_output=True, text=True)
            if s.returncode != 0 or "replayed" not in s.stdout:
                fail("runs sync: exit %d %s %s" % (s.returncode, s.stdout, s.stderr))
            if os.path.exists(spool):
                fail("the spool is still there after a sync")
            if check_same(client, out, name) != total:
                fail("not every value after the sync")
            s = subprocess.run([dtrain, "runs", "sync", copy], capture_output=True, text=True)
            if s.returncode != 0:
                fail("runs sync of the copy: %s" % s.stderr)
            check_same(client, out, name)  # no metric twice
            s = subprocess.run([dtrain, "runs", "sync", "--output-dir", out], capture_output=True, text=True)
            if s.returncode != 0 or "nothing to replay" not in s.stdout:
                fail("runs sync with no spool: exit %d %s" % (s.returncode, s.stdout))
        elif case == "down":
            name = "down-%d" % os.getpid()
            dead = "http://127.0.0.1:%d" % free_port()
            err = train(dtrain, repo, data, out, name, dead)
            lines = mlflow_lines(err)
            if not 1 <= len(lines) <= 2 or len(err.strip().splitlines()) != len(lines):
                fail("expected one warning (and the closing spool line), got: %s" % err)
            params, metrics, _ = local(out, name)
            if sum(len(v) for v in metrics.values()) < 10:
                fail("the SQLite record is incomplete")
            for bad in ("http://", "https:// no"):
                err = train(dtrain, repo, data, out, name + "-bad", bad, steps=4)
                lines = err.strip().splitlines()
                if len(lines) != 1 or "tracking.uri" not in lines[0]:
                    fail("tracking.uri=%s: expected one warning line naming it: %s" % (bad, err))
            spool = os.path.join(out, exp, name, "mlflow-spool.jsonl")
            s = subprocess.run([dtrain, "runs", "sync", "--uri", url, spool], capture_output=True, text=True)
            if s.returncode != 0:
                fail("runs sync --uri: %s %s" % (s.stdout, s.stderr))
            check_same(client, out, name)
            s = subprocess.run([dtrain, "runs", "sync", "--uri", "ftp://x", spool], capture_output=True, text=True)
            if s.returncode != 2:
                fail("runs sync --uri ftp://x: exit %d, expected 2" % s.returncode)
            s = subprocess.run([dtrain, "runs", "sync", spool], capture_output=True, text=True)
            if s.returncode != 1 or len(s.stderr.strip().splitlines()) != 1:
                fail("runs sync of a missing spool: exit %d, %s" % (s.returncode, s.stderr))
        elif case in ("artifacts", "upload-outage", "registry", "models-sync", "launch"):
            import mlflow_artifacts  # beside this file: artefacts, registry, attempts
            mlflow_artifacts.run(case, client, proxy, dtrain, repo, data, out, exp, url)
        else:
            fail("unknown case " + case)
        proxy.close()
        print("PASS", case)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

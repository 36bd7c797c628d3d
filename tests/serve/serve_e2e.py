#!/usr/bin/env python3
"""The monitoring server (include/dtrain/serve.h) end to end, with real `dtrain launch` jobs.

  serve_e2e.py DTRAIN REPO DATA_DIR CASE [OUT_DIR]
  CASE prometheus  a 2-worker job with --monitor-port; Debian's Prometheus scrapes it every 1 s;
                   the series read back through Prometheus's HTTP API (instant and range queries)
                   hold, at each scraped step, exactly the store's loss and learning rate at that
                   step; histogram, workers' memory, restarts, checkpoint age are there; the
                   Grafana dashboard (deploy/grafana/dtrain.json) parses and asks only for series
                   the server publishes
       chromium    headless Chromium loads the dashboard twice during a live run: the DOM shows
                   the run and a loss chart whose point count grew; a PNG screenshot is saved
       bad-input   an occupied port (dtrain serve: one-line error, exit 1; dtrain launch: a
                   warning and the job completes), missing/wrong tokens (401), malformed HTTP
                   (400) and other bad requests: answered, and the server goes on serving
Exit 77 (skipped) when prometheus or chromium is not installed.
"""
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from http_harness import free_port, http, raw  # noqa: E402

dtrain, repo, data, case = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else None
tmp = tempfile.mkdtemp(prefix="dt-serve-")
procs = []
failures = 0


def check(ok, what):
    global failures
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def die(what):
    print("FAIL: " + what, flush=True)
    cleanup()
    sys.exit(1)


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def wait_until(fn, secs, what):
    end = time.time() + secs
    while time.time() < end:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.25)
    die("timed out waiting for " + what)


TRAIN = [os.path.join(repo, "examples/llama-tiny-fortunes.yaml"),
         "data.train=" + os.path.join(data, "fortunes/train"), "data.val=", "data.seq_len=32",
         "data.batch=4", "train.log_every=1", "schedule.warmup_steps=5",
         "output.dir=" + os.path.join(tmp, "runs")]
DB = os.path.join(tmp, "runs", "dtrain.db")


def launch(name, port, steps, extra=(), log=None):
    args = [dtrain, "launch", "-n", "2", "--oversubscribe"]
    if port is not None:
        args += ["--monitor-port", str(port)]
    args += list(extra) + TRAIN + ["train.steps=%d" % steps, "output.run_name=" + name,
                                   "ckpt.every_steps=100", "ckpt.keep_last=3"]
    f = open(log or os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    procs.append(p)
    return p


def stop_launch(p):
    """SIGTERM: the workers save a checkpoint and the launcher exits 75."""
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        return -1


def prom_metrics(port, token=None):
    code, body = http("http://127.0.0.1:%d/metrics" % port, token)
    vals = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, v = line.rsplit(" ", 1)
            vals[name] = float(v)
    return code, body, vals


def families(body):
    return set(re.findall(r"^# TYPE (\S+) ", body, re.M))


def store_metric(run, key):
    """{step: value} of the latest attempt that logged each step."""
    c = sqlite3.connect(DB)
    rows = c.execute("SELECT m.step, m.value, m.attempt FROM metrics m JOIN runs r ON"
                     " r.id = m.run_id WHERE r.name = ? AND m.key = ? ORDER BY attempt, step",
                     (run, key)).fetchall()
    c.close()
    return {s: v for s, v, _ in rows}


def case_prometheus():
    prom = shutil.which("prometheus")
    if not prom:
        print("SKIP: prometheus not installed (apt-get install prometheus)")
        sys.exit(77)
    port, pport = free_port(), free_port()
    job = launch("prom", port, 200000)
    wait_until(lambda: prom_metrics(port)[2].get('dtrain_step{experiment="llama-tiny-fortunes",'
                                                 'run="prom"}', 0) > 5, 120, "the first steps")
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: dtrain\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % port)
    plog = open(os.path.join(tmp, "prometheus.log"), "w")
    pp = subprocess.Popen([prom, "--config.file=" + cfg, "--storage.tsdb.path=" +
                           os.path.join(tmp, "tsdb"), "--web.listen-address=127.0.0.1:%d" % pport],
                          stdout=plog, stderr=subprocess.STDOUT)
    procs.append(pp)
    api = "http://127.0.0.1:%d/api/v1/" % pport

    def q(query, path="query", **kw):
        url = api + path + "?" + urllib.parse.urlencode(dict(query=query, **kw))
        code, body = http(url)
        r = json.loads(body)
        if r.get("status") != "success":
            raise ValueError(body)
        return r["data"]["result"]

    sel = '{job="dtrain",run="prom"}'
    wait_until(lambda: len(q("dtrain_loss%s[2m]" % sel)[0]["values"]) >= 8, 120,
               "8 scrapes of dtrain_loss in Prometheus")
    t_end = time.time()
    up = q('up{job="dtrain"}')
    check(up and up[0]["value"][1] == "1", "Prometheus sees the target up")
    # raw samples: dtrain_step and dtrain_loss of one scrape share its timestamp
    steps = {v[0]: int(float(v[1])) for v in q("dtrain_step%s[2m]" % sel)[0]["values"]}
    losses = {v[0]: float(v[1]) for v in q("dtrain_loss%s[2m]" % sel)[0]["values"]}
    lrs = {v[0]: float(v[1]) for v in q("dtrain_learning_rate%s[2m]" % sel)[0]["values"]}
    store_loss, store_lr = store_metric("prom", "loss"), store_metric("prom", "lr")
    pairs = [(steps[t], losses[t], lrs.get(t)) for t in sorted(steps) if t in losses]
    check(len(pairs) >= 8 and len({s for s, _, _ in pairs}) >= 3,
          "%d scrapes at %d distinct steps" % (len(pairs), len({s for s, _, _ in pairs})))
    bad = [(s, l, store_loss.get(s)) for s, l, _ in pairs
           if s not in store_loss or abs(store_loss[s] - l) > 1e-12 * max(1, abs(l))]
    check(not bad, "every scraped loss equals the store's loss at its step %s" % bad[:3])
    # the store writes in batches that may split a step's values: lr may lag loss by one step
    bad = [(s, lr, store_lr.get(s)) for s, _, lr in pairs
           if lr is None or not any(abs(store_lr.get(s - k, -1) - lr) <= 1e-12 * max(1, abs(lr))
                                    for k in (0, 1))]
    check(not bad, "every scraped learning rate is the store's at its step (or the one "
          "before) %s" % bad[:3])
    rng = q("dtrain_loss" + sel, "query_range", start="%.3f" % (t_end - 60),
            end="%.3f" % t_end, step="1")
    pts = rng[0]["values"] if rng else []
    check(len(pts) >= 5, "query_range: %d points" % len(pts))
    check(all(any(abs(float(v) - sv) <= 1e-12 * max(1, abs(sv)) for sv in store_loss.values())
              for _, v in pts), "query_range values are losses in the store")
    n = q('sum(dtrain_step_seconds_count%s)' % sel)
    last = max(s for s, _, _ in pairs)
    check(n and float(n[0]["value"][1]) >= 5, "step-time histogram count %s" %
          (n[0]["value"][1] if n else None))
    p50 = q('histogram_quantile(0.5, sum by (le) (dtrain_step_seconds_bucket%s))' % sel)
    check(p50 and 0 < float(p50[0]["value"][1]) < 60, "step-time median from the histogram: %s s"
          % (p50[0]["value"][1] if p50 else None))
    rss = q("dtrain_worker_resident_bytes" + sel)
    check(sorted(r["metric"]["rank"] for r in rss) == ["0", "1"] and
          all(float(r["value"][1]) > 1e6 for r in rss), "resident memory of workers 0 and 1")
    dev = q("dtrain_worker_device_info" + sel)
    check(sorted((r["metric"]["rank"], r["metric"]["device"], r["value"][1]) for r in dev) ==
          [("0", "cpu", "1"), ("1", "cpu", "1")], "the device of workers 0 and 1: %s" %
          [(r["metric"].get("rank"), r["metric"].get("device")) for r in dev])
    rs = q("dtrain_restarts_total" + sel)
    check(rs and rs[0]["value"][1] == "0", "no restarts")
    tok = q("dtrain_tokens_per_second" + sel)
    check(tok and float(tok[0]["value"][1]) > 0, "throughput (tokens/s)")
    dw = q("dtrain_data_wait_ratio" + sel)
    check(dw and 0 <= float(dw[0]["value"][1]) <= 1, "data-wait ratio in [0, 1]")
    cw = q("dtrain_comm_wait_ratio" + sel)
    check(cw and 0 <= float(cw[0]["value"][1]) <= 1, "all-reduce wait ratio in [0, 1]")
    # one thread's CPU time over an interval of steps: at most the interval (2% for the clocks)
    cc = q("dtrain_comm_cpu_ratio" + sel)
    check(cc and 0 <= float(cc[0]["value"][1]) <= 1.02, "comm-thread CPU ratio in [0, 1]: %s"
          % (cc[0]["value"][1] if cc else None))
    # gradient bytes each worker reduced in the newest step: whole f32 values, all of them (the
    # example ties its embedding to lm_head, so nothing is sent sparse: 0.8M parameters)
    cb = q("dtrain_allreduce_bytes" + sel)
    v = float(cb[0]["value"][1]) if cb else -1
    check(v > 1e6 and v % 4 == 0, "all-reduce bytes per step %s" % v)
    # cumulative wait seconds: published, never decreasing between two scrapes of an attempt
    for name in ("dtrain_data_wait_seconds", "dtrain_allreduce_wait_seconds",
                 "dtrain_comm_cpu_seconds"):
        vals = [float(v[1]) for v in (q(name + sel + "[2m]") or [{"values": []}])[0]["values"]]
        check(vals and min(vals) >= 0 and vals == sorted(vals),
              "%s published and never decreasing (%d scrapes)" % (name, len(vals)))
    wait_until(lambda: q("dtrain_last_checkpoint_age_seconds" + sel), 120, "a checkpoint")
    age = q("dtrain_last_checkpoint_age_seconds" + sel)
    check(age and 0 <= float(age[0]["value"][1]) < 120, "last checkpoint age %s s" %
          (age[0]["value"][1] if age else None))
    code, body, _ = prom_metrics(port)
    live = families(body)
    rc = stop_launch(job)
    check(rc == 75, "the launcher stopped on SIGTERM with 75 (got %s)" % rc)
    check(last <= max(store_loss), "scraped steps are steps the store holds")
    # Grafana: parses, a Prometheus datasource variable, every series it asks for is published
    g = json.load(open(os.path.join(repo, "deploy/grafana/dtrain.json")))
    dsv = [v for v in g["templating"]["list"] if v["type"] == "datasource"]
    check(dsv and dsv[0]["query"] == "prometheus", "Grafana: a Prometheus datasource variable")
    exprs = [t["expr"] for p in g["panels"] for t in p["targets"]]
    names = set(re.findall(r"\b(dtrain_[a-z_]+?)(?:_bucket|_count|_sum)?\b(?=\{|\[|\))", " ".join(exprs)))
    # published only when recorded: evaluation (no val set here), checkpoint size (a folder
    # retention already deleted)
    optional = {"dtrain_eval_loss", "dtrain_checkpoint_bytes",
                "dtrain_samples_per_second"}
    missing = names - live - optional
    check(len(names) >= 12 and not missing,
          "Grafana: %d series, all published (missing: %s)" % (len(names), sorted(missing)))


def case_chromium():
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chrome:
        print("SKIP: chromium not installed (apt-get install chromium)")
        sys.exit(77)
    port = free_port()
    job = launch("dash", port, 200000)
    wait_until(lambda: prom_metrics(port)[2].get('dtrain_step{experiment="llama-tiny-fortunes",'
                                                 'run="dash"}', 0) > 5, 120, "the first steps")
    runs = json.loads(http("http://127.0.0.1:%d/api/runs" % port)[1])
    rid = runs[0]["id"]
    url = "http://127.0.0.1:%d/#run=%d" % (port, rid)
    common = [chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--user-data-dir=" + os.path.join(tmp, "chrome"),
              "--virtual-time-budget=5000", "--window-size=1280,1000"]

    def dom():
        r = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                           timeout=120)
        return r.stdout

    def points(html):
        m = re.search(r'<svg id="loss-chart" data-points="(\d+)"', html)
        return int(m.group(1)) if m else -1

    d1 = dom()
    n1 = points(d1)
    check('id="run-name">llama-tiny-fortunes/dash<' in d1, "the DOM shows the run")
    check(n1 > 0, "a loss chart with %d points" % n1)
    time.sleep(3)
    d2 = dom()
    n2 = points(d2)
    check(n2 > n1, "the loss chart grew between loads: %d -> %d points" % (n1, n2))
    m = re.search(r'<polyline[^>]*points="([^"]*)"', d2)
    check(m and len(m.group(1).split()) == n2, "the polyline has one vertex per point")
    check('id="run-status" class="st-running">running<' in d2, "status running")
    check(re.search(r'<td><a href="#run=%d">llama-tiny-fortunes/dash</a>' % rid, d2) is not None,
          "the run in the runs table")
    shot_dir = out_dir or tmp
    os.makedirs(shot_dir, exist_ok=True)
    shot = os.path.join(shot_dir, "dashboard.png")
    subprocess.run(common + ["--screenshot=" + shot, url], capture_output=True, timeout=120)
    ok = os.path.exists(shot) and os.path.getsize(shot) > 1000
    if ok:
        with open(shot, "rb") as f:
            hdr = f.read(24)
        w, h = int.from_bytes(hdr[16:20], "big"), int.from_bytes(hdr[20:24], "big")
        ok = hdr[:8] == b"\x89PNG\r\n\x1a\n" and w == 1280 and h == 1000
    check(ok, "screenshot %s is a 1280x1000 PNG" % shot)
    rc = stop_launch(job)
    check(rc == 75, "the launcher stopped on SIGTERM with 75 (got %s)" % rc)


def case_bad_input():
    # a store to serve: a short job, no monitor
    p = launch("small", None, 20)
    check(p.wait(timeout=300) == 0, "a short job to fill the store")
    # occupied port: dtrain serve fails with one line naming address and port
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    busy = blocker.getsockname()[1]
    r = subprocess.run([dtrain, "serve", "--db", DB, "--port", str(busy)], capture_output=True,
                       text=True, timeout=30)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "127.0.0.1:%d" % busy in lines[0] and
          "in use" in lines[0], "serve on a busy port: exit %d, %r" % (r.returncode, r.stderr))
    r = subprocess.run([dtrain, "serve", "--db", DB, "--port", "70000"], capture_output=True,
                       text=True, timeout=30)
    check(r.returncode == 2 and "--port 70000" in r.stderr, "serve --port 70000: usage error")
    r = subprocess.run([dtrain, "serve", "--db", DB, "--addr", "256.1.2.3", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "256.1.2.3" in r.stderr, "serve --addr 256.1.2.3: %r" % r.stderr)
    # the launcher on a busy port: a warning, and the job runs to the end
    log = os.path.join(tmp, "busy.log")
    p = launch("busy", busy, 20, log=log)
    rc = p.wait(timeout=300)
    txt = open(log).read()
    check(rc == 0 and re.search(r"warning: monitor: cannot listen on 127\.0\.0\.1:%d: Address "
                                r"already in use.*monitoring is off" % busy, txt) is not None,
          "launch with a busy monitor port: warned, exit %d" % rc)
    blocker.close()
    # a server with a token
    token = "s3cret-token-42"
    sp = subprocess.Popen([dtrain, "serve", "--db", DB, "--port", "0", "--token", token],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(sp)
    line = sp.stdout.readline()
    while line.startswith("dtrain serve: warning"):
        line = sp.stdout.readline()
    m = re.search(r"127\.0\.0\.1:(\d+)/", line)
    if not m:
        die("serve did not print its address: %r" % line)
    port = int(m.group(1))
    base = "http://127.0.0.1:%d" % port
    for path in ("/metrics", "/", "/api/runs"):
        check(http(base + path)[0] == 401, "%s without a token: 401" % path)
        check(http(base + path, "s3cret-token-43")[0] == 401, "%s, wrong token: 401" % path)
        check(http(base + path, "s3cret")[0] == 401, "%s, a prefix of the token: 401" % path)
    check(http(base + "/metrics", token + "x")[0] == 401, "token plus a character: 401")
    code, body, vals = prom_metrics(port, token)
    check(code == 200 and vals.get('dtrain_step{experiment="llama-tiny-fortunes",run="small"}')
          == 20, "/metrics with the token: the short run at step 20")
    check(http(base + "/?access_token=" + token)[0] == 200, "the dashboard with ?access_token")
    check(http(base + "/?access_token=nope")[0] == 401, "?access_token wrong: 401")
    check(http(base + "/nothing", token)[0] == 404, "unknown path: 404")
    check(http(base + "/metrics", token, "POST")[0] == 405, "POST: 405")
    check(http(base + "/api/runs/999999", token)[0] == 404, "unknown run: 404")
    check(http(base + "/api/runs/llama-tiny-fortunes%2Fsmall/metrics?key=loss&since=abc",
               token)[0] == 400, "since=abc: 400")
    check(http(base + "/api/runs/1/metrics", token)[0] == 400, "metrics without key: 400")
    c, b = http(base + "/api/runs/llama-tiny-fortunes%2Fsmall/metrics?key=loss&since=15", token)
    pts = json.loads(b)["points"] if c == 200 else []
    want = store_metric("small", "loss")
    check([p[0] for p in pts] == [16, 17, 18, 19, 20] and
          all(abs(p[1] - want[p[0]]) < 1e-12 for p in pts), "metrics since step 15: the store's")
    # malformed HTTP on raw connections
    auth = ("Authorization: Bearer %s\r\n" % token).encode()
    h = b"Host: x\r\n" + auth
    for name, req, want in [
            ("a request line without a version", b"GET /\r\n\r\n", "400"),
            ("a request line with 4 words", b"GET / HTTP/1.1 extra\r\n" + h + b"\r\n", "400"),
            ("a bad protocol name", b"GET / FOO/1.1\r\n" + h + b"\r\n", "400"),
            ("a header without a colon", b"GET /metrics HTTP/1.1\r\n" + h + b"NoColon\r\n\r\n",
             "400"),
            ("HTTP/1.1 without Host", b"GET /metrics HTTP/1.1\r\n" + auth + b"\r\n", "400"),
            ("HTTP/2.5", b"GET /metrics HTTP/2.5\r\n" + h + b"\r\n", "505"),
            ("a 200 KB header", b"GET / HTTP/1.1\r\n" + h + b"X-Big: " + b"a" * 200000 +
             b"\r\n\r\n", "431"),
            # one word, no URI: libmicrohttpd closes the connection without an answer
            ("a garbage request line", b"GARBAGE\r\n\r\n", ""),
            ("binary junk", bytes(range(1, 256)) + b"\r\n\r\n", "")]:
        resp = raw(port, req)
        st = resp.split(" ", 2)[1] if resp.startswith("HTTP/1.1 ") else resp[:40]
        check(st == want, "%s: answered %r (expected %r)" % (name, st, want or "closed"))
    for i in range(20):  # connections dropped half way
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        s.close()
    check(sp.poll() is None, "the server is still running")
    check(prom_metrics(port, token)[0] == 200, "and still serving /metrics")
    sp.send_signal(signal.SIGTERM)
    check(sp.wait(timeout=30) == 0, "dtrain serve exits 0 on SIGTERM")


try:
    {"prometheus": case_prometheus, "chromium": case_chromium,
     "bad-input": case_bad_input}[case]()
finally:
    if failures and os.path.isdir(tmp):
        for f in os.listdir(tmp):
            if f.endswith(".log"):
                print("---- " + f)
                print(open(os.path.join(tmp, f)).read()[-3000:])
    cleanup()
print("%s: %s" % (case, "FAILED (%d)" % failures if failures else "passed"))
sys.exit(1 if failures else 0)

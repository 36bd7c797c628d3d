#!/usr/bin/env python3
"""The dashboard's sweep view (src/serve/api_sweep.c, dashboard_sweep.c) end to end.

  sweep_dash.py DTRAIN REPO DATA_DIR [OUT_DIR]

A real sweep (6 Sobol trials of the tiny Llama over a log-uniform learning rate and a list of
weight decays, 9 steps, ASHA with rungs 1, 3, 9, 2 slots) is served by `dtrain serve`
(started before it: while it runs, the API shows it running with trials running, at most the
slots at a time, some before their first report);
/api/sweeps/ID is checked against sweep.json (trials, statuses, rungs) and the store read with
sqlite3 (each trial's metric at its last rung, the best: the lowest loss of the trials that
reached the furthest step); then headless Chromium loads /sweeps and the DOM must show one
parallel-coordinates line per trial (the stopped ones faded), one axis per parameter plus the
metric (the learning rate's on a log scale), the trials table sorted by the metric with the
store's best marked, and one curve per trial with as many points as the store has steps; served
with a token, the page opened with ?access_token= keeps it in its links to the runs. A
screenshot goes to OUT_DIR/sweeps.png. Exit 77 (skipped) without chromium.
"""
import json
import math
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from http_harness import http  # noqa: E402

dtrain, repo, data = sys.argv[1:4]
out_dir = sys.argv[4] if len(sys.argv) > 4 else None
chrome = shutil.which("chromium") or shutil.which("chromium-browser")
if not chrome:
    print("SKIP: chromium not installed (apt-get install chromium)")
    sys.exit(77)
tmp = tempfile.mkdtemp(prefix="dt-sweepdash-")
procs, failures = [], 0


def check(ok, what):
    global failures
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    failures += not ok
    return ok


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def die(what):
    print("FAIL: " + what, flush=True)
    cleanup()
    sys.exit(1)


runs = os.path.join(tmp, "runs")
with open(os.path.join(tmp, "sweep.yaml"), "w") as f:
    f.write(f"""base: {repo}/examples/llama-tiny-fortunes.yaml
overrides:
  data.train: {data}/fortunes/train
  data.val: ""
  data.seq_len: 32
  data.batch: 4
  train.log_every: 1
  output.dir: {runs}
  output.export: false
  schedule.warmup_steps: 0
parameters:
  optim.lr: {{min: 1.0e-4, max: 3.0e-2, distribution: log_uniform}}
  optim.weight_decay: [0.0, 0.1]
sampler: sobol
trials: 6
max_concurrent: 2
max_steps: 9
metric: train_loss
early_stopping: {{rule: asha, grace_period: 1, reduction_factor: 3}}
""")
env = dict(os.environ, OMP_NUM_THREADS="1")
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
os.makedirs(runs)
# served from before the first run: the store appears when the sweep begins
srv = subprocess.Popen([dtrain, "serve", "--output-dir", runs, "--port", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
procs.append(srv)
base = "http://127.0.0.1:%d" % port
t0 = time.time()
sweep = subprocess.Popen([dtrain, "sweep", os.path.join(tmp, "sweep.yaml"), "--name", "sw",
                          "--slots", "2", "--threads-per-slot", "1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
procs.append(sweep)
# while it runs: the sweep "running" with running trials (a first segment is found by its
# name, before the sweep tags it at its first report)
live, first = [], set()
while sweep.poll() is None and time.time() - t0 < 300:
    try:
        code, body = http(base + "/api/sweeps/llama-tiny-fortunes%2Fsw")
        if code == 200:
            o = json.loads(body)
            if o["status"] == "running":
                live.append(sorted(t["trial"] for t in o["trials"] if t["status"] == "running"))
                first |= {t["trial"] for t in o["trials"]
                          if t["status"] == "running" and t["step"] == -1 and t["metric"] is None}
    except (OSError, ValueError):
        pass
    time.sleep(0.1)
out, err = sweep.communicate(timeout=300)
if sweep.returncode != 0:
    print(err)
    die("the sweep failed (exit %d)" % sweep.returncode)
print("ok:   the sweep ran in %.1f s" % (time.time() - t0))
check(any(live) and all(len(x) <= 2 for x in live),
      "while it ran: trials running, at most 2 (the slots) at a time: %s" %
      sorted({tuple(x) for x in live})[:8])
check(first, "trials %s seen running before their first report (untagged: found by name)" %
      sorted(first))
state = json.load(open(os.path.join(runs, "llama-tiny-fortunes", "sw", "sweep.json")))

# ---- the API against sweep.json and the store ----------------------------------------------
code, body = http(base + "/api/sweeps")
sweeps = json.loads(body) if code == 200 else []
check([(x["experiment"], x["id"], x["trials"]) for x in sweeps] ==
      [("llama-tiny-fortunes", "sw", 6)], "/api/sweeps lists the one sweep: %s" % body[:200])
code, body = http(base + "/api/sweeps/llama-tiny-fortunes%2Fsw")
if code != 200:
    die("/api/sweeps/llama-tiny-fortunes/sw: HTTP %d %s" % (code, body))
sw = json.loads(body)
check(sw["metric"] == "loss" and sw["mode"] == "min" and sw["max_steps"] == 9,
      "metric loss, mode min, max_steps 9")
check([(p["key"], p["kind"]) for p in sw["params"]] ==
      [("optim.lr", "log_uniform"), ("optim.weight_decay", "values")], "the swept parameters")
db = sqlite3.connect(os.path.join(runs, "dtrain.db"))


def store_loss(run):
    """{step: loss} of the latest attempt that logged each step."""
    rows = db.execute("SELECT m.step, m.value FROM metrics m JOIN runs r ON r.id = m.run_id"
                      " WHERE r.name = ? AND m.key = 'loss' ORDER BY m.attempt, m.step",
                      (run,)).fetchall()
    return dict(rows)


want = {t["trial"]: t for t in state["trials"]}
check(sorted(t["trial"] for t in sw["trials"]) == sorted(want), "every trial of sweep.json")
for t in sw["trials"]:
    w = want.get(t["trial"], {})
    loss = store_loss(t["run"])
    ok = (t["run"] == w.get("run") and t["status"] == w.get("status") and t["step"] == w.get("step")
          and t["metric"] is not None and t["step"] in loss
          # cJSON prints 15 significant digits when they read back within an epsilon
          and math.isclose(t["metric"], loss[t["step"]], rel_tol=1e-13)
          and sorted(t["params"]) == sorted(w["params"])
          and all(math.isclose(float(t["params"][k]), float(v), rel_tol=1e-5)
                  for k, v in w["params"].items()))
    check(ok, "trial %d: %s at step %d, loss %s (store %s), params %s" %
          (t["trial"], t["status"], t["step"], t["metric"], loss.get(t["step"]), t["params"]))
furthest = max(t["step"] for t in state["trials"])
best_run = min((store_loss(t["run"])[t["step"]], t["run"])
               for t in state["trials"] if t["step"] == furthest)[1]
best_trial = [t["trial"] for t in state["trials"] if t["run"] == best_run][0]
check(sw["best"] and sw["best"]["run"] == best_run and sw["best"]["step"] == furthest,
      "best %s = the store's lowest loss at step %d (%s)" % (sw["best"], furthest, best_run))
stopped = {t["trial"] for t in state["trials"] if t["status"] == "stopped"}
check(len(stopped) >= 1, "ASHA stopped %d trials" % len(stopped))
code, body = http(base + "/api/sweeps/nosuch")
check(code == 404 and "nosuch" in json.loads(body)["error"], "an unknown sweep: 404 %s" % body)
code, body = http(base + "/api/sweeps/" + best_run)
check(code == 404 and "not a sweep" in json.loads(body)["error"], "a trial is not a sweep: 404")

# ---- the page in a real browser ---------------------------------------------------------------
url = base + "/sweeps#sweep=" + urllib.parse.quote("llama-tiny-fortunes/sw", safe="")
common = [chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--no-first-run", "--user-data-dir=" + os.path.join(tmp, "chrome"),
          "--virtual-time-budget=5000", "--window-size=1280,1400"]
html = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                      timeout=120).stdout
html = html[:html.find("<script")]  # the rendered page, not the code that renders it
check('id="sweep-name">llama-tiny-fortunes/sw<' in html, "the DOM shows the sweep")
pc = re.findall(r'<polyline class="pc-line([^"]*)" data-trial="(\d+)"', html)
check(sorted(int(n) for _, n in pc) == sorted(want),
      "one parallel-coordinates line per trial: %s" % [n for _, n in pc])
check({int(n) for c, n in pc if "dim" in c.split()} == stopped,
      "the stopped trials' lines are faded: %s" % stopped)
axes = re.findall(r'<g class="axis" data-key="([^"]*)" data-scale="([^"]*)"', html)
check(axes == [("optim.lr", "log"), ("optim.weight_decay", "linear"), ("loss", "linear")],
      "axes = parameters + 1, the learning rate's log: %s" % axes)
rows = re.findall(r'<tr class="([^"]*)" data-trial="(\d+)">.*?<td class="metric">([^<]*)</td>',
                  html)
check([int(n) for c, n, _ in rows if c == "best"] == [best_trial],
      "the table marks trial %d best" % best_trial)
vals = [float(v) for _, _, v in rows]
check(len(rows) == len(want) and vals == sorted(vals), "the table is sorted by loss: %s" % vals)
m = re.search(r'id="best-trial">(\d+)<', html)
check(m and int(m.group(1)) == best_trial, "best so far: trial %s" % (m and m.group(1)))
curves = {int(n): int(p) for n, p in
          re.findall(r'<polyline class="curve[^"]*" data-trial="(\d+)" data-points="(\d+)"', html)}
check(curves == {t["trial"]: len(store_loss(t["run"])) for t in state["trials"]},
      "one curve per trial, a point per stored step: %s" % curves)
# with a token: the page is opened with ?access_token= and its links to the runs keep it
s = socket.socket()
s.bind(("127.0.0.1", 0))
tport = s.getsockname()[1]
s.close()
tok = "sweep-view-token"
tsrv = subprocess.Popen([dtrain, "serve", "--output-dir", runs, "--port", str(tport), "--token",
                         tok], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
procs.append(tsrv)
tbase = "http://127.0.0.1:%d" % tport
for _ in range(100):
    try:
        if http(tbase + "/api/sweeps", tok)[0] == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
check(http(tbase + "/sweeps")[0] == 401, "with a token set, /sweeps without it: 401")
thtml = subprocess.run(common + ["--dump-dom", tbase + "/sweeps?access_token=" + tok +
                                 "#sweep=llama-tiny-fortunes%2Fsw"],
                       capture_output=True, text=True, timeout=120).stdout
thtml = thtml[:thtml.find("<script")]
links = re.findall(r'<a href="([^"]*)">sw-t\d+</a>', thtml)
check('id="sweep-name">llama-tiny-fortunes/sw<' in thtml and len(links) == len(want) + 1 and
      all(x.startswith("/?access_token=" + tok + "#run=") for x in links) and
      '<a href="/?access_token=%s">runs</a>' % tok in thtml,
      "with ?access_token=: the sweep shown, its run links keep the token: %s" % links[:2])
shot = os.path.join(out_dir or tmp, "sweeps.png")
os.makedirs(os.path.dirname(shot), exist_ok=True)
subprocess.run(common + ["--screenshot=" + shot, url], capture_output=True, timeout=120)
ok = os.path.exists(shot) and os.path.getsize(shot) > 1000
if ok:
    with open(shot, "rb") as f:
        hdr = f.read(24)
    ok = hdr[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(hdr[16:20], "big") == 1280
check(ok, "screenshot %s" % shot)
cleanup()
print("%s in %.1f s" % ("FAILED" if failures else "passed", time.time() - t0))
sys.exit(1 if failures else 0)

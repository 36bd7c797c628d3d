#!/usr/bin/env python3
"""The experiment store under faults, with real 2-worker `dtrain launch` jobs of the tiny Llama.

  track_faults.py DTRAIN REPO DATA_DIR CASE
  CASE kill        worker rank 1 (found as a child of mpirun, by OMPI_COMM_WORLD_RANK) is
                   SIGKILLed after rank 0 committed metrics past the newest checkpoint; the
                   launcher resumes and finishes. `runs export --format json` and `runs show`:
                   2 attempts, the first failed with the launcher's reason (the worker, the
                   signal, the checkpoint step it restarted from, restart 1/3), the second and
                   the run done, tag restarts=1; every logged step of each attempt stored once,
                   the repeated steps told apart by attempt (and equal: the resume is exact);
                   checkpoint artifacts of both attempts and the exported model. Then the same
                   kill with --max-failures 0 (the run failed: "...; gave up after 1 failure"),
                   and a data error (the workers exit before rank 0 reaches the store: the
                   launcher records the run and its one failed attempt itself)
       concurrent  two launches with different run names started together on one new
                   tracking.uri: both done with every metric row (steps/log_every per key), one
                   attempt each, no "database is locked" or tracking warning in either log,
                   PRAGMA integrity_check ok
       bad-store   tracking.uri under /proc (cannot be created) and under a regular file (not a
                   directory): the job trains to the end (exit 0, model written) and prints
                   exactly one warning, naming the path (the workers run with tracking off: no
                   second warning); with --monitor-port too, one more line saying monitoring is
                   off
       monitor     a live job's monitor (--monitor-port 0 --monitor-token): requests without or
                   with a wrong token (401), malformed HTTP (400), junk, dropped and held-open
                   connections, while it trains; the monitor keeps answering, and the job ends
                   done with every metric row and no warning. A busy --monitor-port: the job
                   trains without monitoring and says so in exactly one line naming the port
                   (the launcher does not refuse to start: monitoring never stops a job)
Already covered elsewhere (not repeated here): tests/serve/serve_e2e.py bad-input (dtrain serve on
a busy port, tokens and malformed HTTP against `dtrain serve`), tests/track/runs_cli.sh degraded
(`dtrain train` on an unusable store, and a store failing mid-run).
"""
import glob
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
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from http_harness import http, raw  # noqa: E402

dtrain, repo, data, case = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix="dt-track-faults-")
procs = []
failures = 0
EXP = "llama-tiny-fortunes"
# keys logged every interval by a 2-worker job (src/train/track_glue.c)
LOG_KEYS = ["comm_bytes", "comm_cpu", "comm_cpu_s", "comm_wait", "comm_wait_s", "data_wait", "data_wait_s", "grad_norm", "loss", "lr",
            "samples_per_s", "tokens_per_s"]


def check(ok, what):
    global failures
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def die(what):
    print("FAIL: " + what, flush=True)
    raise SystemExit(1)


def train_args(name, steps, log_every, extra=()):
    return [os.path.join(repo, "examples/llama-tiny-fortunes.yaml"),
            "data.train=" + os.path.join(data, "fortunes/train"), "data.val=", "data.seq_len=32",
            "data.batch=2", "schedule.warmup_steps=5", "train.steps=%d" % steps,
            "train.log_every=%d" % log_every, "output.dir=" + os.path.join(tmp, "runs"),
            "output.run_name=" + name] + list(extra)


def launch(name, steps, log_every, opts=(), extra=()):
    log = os.path.join(tmp, name + ".log")
    p = subprocess.Popen(["nice", "-n", "10", dtrain, "launch", "-n", "2", "--oversubscribe",
                          "--backoff", "0.2"] + list(opts) + train_args(name, steps, log_every,
                                                                         extra),
                         stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    procs.append(p)
    p.log = log
    return p


def kill_job(p):
    """The launcher and mpirun's process group (mpirun runs in its own: setpgid)."""
    for mp in children(p.pid):
        try:
            os.killpg(mp, signal.SIGKILL)
        except OSError:
            pass
    p.kill()
    p.wait()


def finish(p, secs=150):
    try:
        return p.wait(timeout=secs)
    except subprocess.TimeoutExpired:
        kill_job(p)
        return -9


def text(p):
    return open(p.log, errors="replace").read()


def wait_for(fn, secs, what):
    end = time.time() + secs
    while time.time() < end:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError, KeyError, IndexError, AttributeError, sqlite3.Error):
            pass
        time.sleep(0.05)
    die("timed out waiting for " + what)


def children(pid):
    out = []
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            f = open(st).read()
        except OSError:
            continue
        fields = f[f.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(st.split("/")[2]))
    return out


def workers(launcher):
    """{rank: pid} of the `dtrain train` processes mpirun (the launcher's child) started."""
    ranks = {}
    for mp in children(launcher.pid):
        for c in children(mp):
            try:
                env = open("/proc/%d/environ" % c, "rb").read().split(b"\0")
                cmd = open("/proc/%d/cmdline" % c, "rb").read().split(b"\0")
            except OSError:
                continue
            if b"train" not in cmd:
                continue
            for e in env:
                if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                    ranks[int(e.split(b"=")[1])] = c
    return ranks


def db_path():
    return os.path.join(tmp, "runs", "dtrain.db")


def q(sql, args=(), db=None):
    c = sqlite3.connect(db or db_path(), timeout=30)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def export(name, db=None):
    r = subprocess.run([dtrain, "runs", "export", name, "--format", "json", "--db",
                        db or db_path()], capture_output=True, text=True, timeout=60)
    if r.returncode:
        die("runs export %s: %s" % (name, r.stderr))
    return json.loads(r.stdout)


def committed(name):
    """Steps of the committed checkpoints on disk (trainer_state.json written last)."""
    root = os.path.join(tmp, "runs", EXP, name, "checkpoints")
    return sorted(int(d[5:]) for d in os.listdir(root) if d.startswith("step-") and
                  os.path.exists(os.path.join(root, d, "trainer_state.json")))


# ---- kill -----------------------------------------------------------------------------------

def case_kill():
    steps, every, ck = 200, 5, 20
    job = launch("hit", steps, every, extra=["ckpt.every_steps=%d" % ck, "ckpt.keep_last=0"])
    ranks = wait_for(lambda: (lambda w: w if len(w) == 2 else None)(workers(job)), 60,
                     "two workers under mpirun")
    wait_for(lambda: "checkpoint step %d committed" % ck in text(job), 90, "a checkpoint")
    # Freeze the job (rank 0 waits for rank 1 in the all-reduce) and let rank 0's store writer
    # commit what it logged (every 2 s): once the stored steps and the committed checkpoints
    # stay the same for 3 s, the kill lands with steps stored past the newest checkpoint, so the
    # resumed attempt repeats some of them.
    def frozen():
        return (q("SELECT MAX(step) FROM metrics WHERE key = 'loss' AND attempt = 1")[0][0] or -1,
                committed("hit")[-1])

    stored = resume = -1
    for _ in range(10):
        os.kill(ranks[1], signal.SIGSTOP)
        seen, since = None, time.time()
        while time.time() - since < 3.0:
            time.sleep(0.25)
            now = frozen()
            if now != seen:
                seen, since = now, time.time()
        stored, resume = seen
        if stored > resume:
            break
        os.kill(ranks[1], signal.SIGCONT)  # at a checkpoint step: go on a little
        time.sleep(0.3)
    if not check(stored > resume, "attempt 1 stored step %d, past checkpoint %d" %
                 (stored, resume)):
        os.kill(ranks[1], signal.SIGCONT)
        return
    os.kill(ranks[1], signal.SIGKILL)
    rc = finish(job)
    log = text(job)
    check(rc == 0, "the launcher resumed and finished (exit %d)" % rc)
    check("attempt 0 failed: worker 1 killed by signal 9" in log, "the launcher saw the kill")
    d = export("hit")
    run, att = d["run"], d["attempts"]
    print("attempts:", [(a["attempt"], a["status"], a["exit_reason"]) for a in att])
    check(run["status"] == "done" and run["attempts"] == 2, "run %s with %d attempts" %
          (run["status"], run["attempts"]))
    want = ("worker 1 killed by signal 9 (Killed); restarting from checkpoint step %d "
            "(restart 1/3)" % resume)
    check(len(att) == 2 and att[0]["status"] == "failed" and att[0]["exit_reason"] == want and
          att[0]["end_time"] is not None and att[0]["end_time"] <= att[1]["start_time"],
          "attempt 1 failed: %r" % (att[0]["exit_reason"] if att else None))
    check(len(att) == 2 and att[1]["status"] == "done" and
          att[1]["exit_reason"] == "finished %d steps" % steps and
          att[1]["writer_pid"] != att[0]["writer_pid"], "attempt 2 done by a new rank 0")
    check(d["tags"].get("restarts") == "1" and d["tags"].get("resumed_from_step") == str(resume),
          "tags %s" % d["tags"])
    by = {}
    for m in d["metrics"]:
        by.setdefault((m["key"], m["attempt"]), []).append(m["step"])
    for k in LOG_KEYS:
        s1, s2 = by.get((k, 1), []), by.get((k, 2), [])
        check(s1 == list(range(every, stored + 1, every)) and
              s2 == list(range(resume + every, steps + 1, every)),
              "%s: attempt 1 steps %d..%d (%d), attempt 2 steps %d..%d (%d)" %
              (k, s1[0] if s1 else -1, s1[-1] if s1 else -1, len(s1), s2[0] if s2 else -1,
               s2[-1] if s2 else -1, len(s2)))
    loss = {(m["attempt"], m["step"]): m["value"] for m in d["metrics"] if m["key"] == "loss"}
    both = [s for s in range(resume + every, stored + 1, every)]
    check(both and all(loss.get((1, s)) == loss.get((2, s)) is not None for s in both),
          "repeated steps %s: one row per attempt, equal losses (exact resume)" % both)
    ck1 = sorted(a["step"] for a in d["artifacts"] if a["kind"] == "checkpoint" and
                 a["attempt"] == 1)
    ck2 = sorted(a["step"] for a in d["artifacts"] if a["kind"] == "checkpoint" and
                 a["attempt"] == 2)
    model = [a for a in d["artifacts"] if a["kind"] == "model"]
    check(ck1 == list(range(ck, resume + 1, ck)) and ck2 == list(range(resume + ck, steps + 1, ck))
          and all(os.path.isdir(a["uri"]) for a in d["artifacts"]),
          "checkpoints: attempt 1 %s, attempt 2 %s, on disk" % (ck1, ck2))
    check(len(model) == 1 and model[0]["attempt"] == 2 and model[0]["step"] == steps,
          "the exported model, attempt 2")
    show = subprocess.run([dtrain, "runs", "show", "hit", "--db", db_path()], capture_output=True,
                          text=True, timeout=60).stdout
    check(re.search(r"^    #1 +failed .*: " + re.escape(want) + "$", show, re.M) is not None and
          re.search(r"^    #2 +done .*: finished %d steps$" % steps, show, re.M) is not None and
          re.search(r"^  attempts +2$", show, re.M) is not None, "runs show lists both attempts")
    # no restart budget: the run ends failed, with the launcher's reason
    job = launch("once", steps, every, opts=["--max-failures", "0"],
                 extra=["ckpt.every_steps=%d" % ck])
    ranks = wait_for(lambda: (lambda w: w if len(w) == 2 else None)(workers(job)), 60,
                     "two workers under mpirun")
    wait_for(lambda: "checkpoint step %d committed" % ck in text(job), 90, "a checkpoint")
    os.kill(ranks[1], signal.SIGKILL)
    rc = finish(job)
    d = export("once")
    want = "worker 1 killed by signal 9 (Killed); gave up after 1 failure (--max-failures 0)"
    check(rc == 1 and d["run"]["status"] == "failed" and d["run"]["exit_reason"] == want and
          [(a["status"], a["exit_reason"]) for a in d["attempts"]] == [("failed", want)] and
          d["tags"].get("restarts") == "0",
          "budget exhausted (exit %d): run %s (%s), tags %s" % (rc, d["run"]["status"],
                                                                d["run"]["exit_reason"], d["tags"]))
    # a data error: the workers exit before rank 0 reaches the store; the launcher records it
    job = launch("nodata", steps, every, opts=["--max-failures", "-1"],
                 extra=["data.train=" + os.path.join(tmp, "nope")])
    rc = finish(job)
    d = export("nodata")
    att = d["attempts"]
    check(rc == 1 and d["run"]["status"] == "failed" and d["run"]["attempts"] == 1 and
          len(att) == 1 and att[0]["exit_reason"].endswith("(config or data error); not retried")
          and att[0]["writer_pid"] == job.pid and att[0]["world_size"] == 2 and
          att[0]["hosts"] == socket.gethostname() + ":2" and not d["metrics"],
          "a run no worker began, recorded by the launcher (exit %d): %s" %
          (rc, [(a["status"], a["exit_reason"], a["writer_pid"], a["hosts"]) for a in att]))


# ---- concurrent ------------------------------------------------------------------------------

def case_concurrent():
    steps, every = 300, 1
    db = os.path.join(tmp, "store", "shared.db")  # created by whichever comes first
    jobs = [launch(n, steps, every, extra=["tracking.uri=" + db, "ckpt.every_steps=50"])
            for n in ("c1", "c2")]
    rcs = [finish(j, 170) for j in jobs]
    check(rcs == [0, 0], "both launches finished (exit %s)" % rcs)
    for j, n in zip(jobs, ("c1", "c2")):
        log = text(j)
        bad = [l for l in log.splitlines() if re.search(r"locked|busy|warning", l, re.I)]
        check(not bad, "%s: no lock error or warning in the log %s" % (n, bad[:3]))
        rows = dict(q("SELECT m.key, COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id"
                      " WHERE r.name = ? GROUP BY m.key", (n,), db))
        check(all(rows.get(k) == steps // every for k in LOG_KEYS),
              "%s: %d rows for each of %d keys: %s" % (n, steps // every, len(LOG_KEYS), rows))
        r = q("SELECT status, attempts FROM runs WHERE name = ?", (n,), db)
        a = q("SELECT a.attempt, a.status FROM attempts a JOIN runs r ON r.id = a.run_id"
              " WHERE r.name = ?", (n,), db)
        check(r == [("done", 1)] and a == [(1, "done")], "%s: run %s, attempts %s" % (n, r, a))
        ck = q("SELECT COUNT(*) FROM artifacts a JOIN runs r ON r.id = a.run_id WHERE r.name = ?"
               " AND kind = 'checkpoint'", (n,), db)[0][0]
        check(ck == steps // 50, "%s: %d checkpoint artifacts" % (n, ck))
    t = q("SELECT name, start_time, end_time FROM runs ORDER BY name", db=db)
    check(len(t) == 2 and t[0][1] < t[1][2] and t[1][1] < t[0][2],
          "the two runs overlapped in time: %s" % t)
    check(q("PRAGMA integrity_check", db=db) == [("ok",)], "PRAGMA integrity_check: ok")


# ---- bad-store -------------------------------------------------------------------------------

def case_bad_store():
    plain = os.path.join(tmp, "plain-file")
    open(plain, "w").write("a regular file, not a folder\n")
    for name, uri, opts in [("proc", "/proc/dtrain-track-faults/x.db", []),
                            ("file", plain + "/x.db", ["--monitor-port", "0"])]:
        job = launch(name, 20, 5, opts=opts, extra=["tracking.uri=" + uri])
        rc = finish(job)
        log = text(job)
        warn = [l for l in log.splitlines() if "warning" in l.lower()]
        print("\n".join(warn))
        model = os.path.join(tmp, "runs", EXP, name, "model")
        check(rc == 0 and os.path.isdir(model),
              "%s: trained to the end (exit %d)" % (name, rc))
        ok = len(warn) == 1 + len(opts) // 2 and uri in warn[0] and "tracking" in warn[0] and \
            "training goes on" in warn[0]
        if opts:
            ok = ok and "monitoring is off" in warn[1] and "--monitor-port" in warn[1]
        check(ok, "%s: %d warning line(s), the first naming %s" % (name, len(warn), uri))
        check(not os.path.exists(uri), "%s: no store at %s" % (name, uri))
    check(not os.path.exists(db_path()), "the workers did not fall back to another store")


# ---- monitor ---------------------------------------------------------------------------------


def case_monitor():
    steps, every, token = 1500, 5, "tok-3141"
    job = launch("mon", steps, every, opts=["--monitor-port", "0", "--monitor-token", token])
    port = int(wait_for(lambda: re.search(r"monitor on http://127\.0\.0\.1:(\d+)/", text(job)),
                        60, "the monitor's address").group(1))
    base = "http://127.0.0.1:%d" % port
    sel = 'dtrain_step{experiment="%s",run="mon"} ' % EXP
    step = lambda: int(float(re.search(re.escape(sel) + r"(\S+)", http(base + "/metrics",
                                                                       token)[1]).group(1)))
    s0 = wait_for(lambda: step() > 0 and step(), 90, "the first steps on /metrics")
    held = socket.create_connection(("127.0.0.1", port), timeout=10)
    held.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
    for path in ("/metrics", "/", "/api/runs"):
        check(http(base + path)[0] == 401, "%s without a token: 401" % path)
        check(http(base + path, "tok-3142")[0] == 401, "%s with a wrong token: 401" % path)
    auth = ("Authorization: Bearer %s\r\n" % token).encode()
    for what, req in [("no version", b"GET /metrics\r\n\r\n"),
                      ("a header without a colon",
                       b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + auth + b"NoColon\r\n\r\n"),
                      ("HTTP/1.1 without Host", b"GET /metrics HTTP/1.1\r\n" + auth + b"\r\n")]:
        resp = raw(port, req)
        check(resp.startswith("HTTP/1.1 400"), "malformed (%s): %r" % (what, resp[:12]))
    raw(port, bytes(range(1, 256)) + b"\r\n\r\n")
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        s.close()
    s1 = wait_for(lambda: step() > s0 and step(), 60, "the step to advance")
    check(s1 > s0 and job.poll() is None,
          "while the job trains, the monitor still answers with a held-open connection: step "
          "%d -> %d" % (s0, s1))
    rc = finish(job)
    held.close()
    log = text(job)
    warn = [l for l in log.splitlines() if re.search(r"warning|locked", l, re.I)]
    check(rc == 0 and os.path.isdir(os.path.join(tmp, "runs", EXP, "mon", "model")) and not warn,
          "the job finished undisturbed (exit %d, warnings %s)" % (rc, warn[:3]))
    rows = dict(q("SELECT m.key, COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id"
                  " WHERE r.name = 'mon' GROUP BY m.key"))
    check(all(rows.get(k) == steps // every for k in LOG_KEYS), "every metric row: %s" % rows)
    check(q("SELECT status, attempts FROM runs WHERE name = 'mon'") == [("done", 1)], "run done")
    # a busy port: trains without monitoring, one line naming the port
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    busy = blocker.getsockname()[1]
    job = launch("busy", 10, 5, opts=["--monitor-port", str(busy)])
    rc = finish(job)
    blocker.close()
    lines = [l for l in text(job).splitlines() if str(busy) in l or "monitor" in l]
    check(rc == 0 and len(lines) == 1 and "127.0.0.1:%d" % busy in lines[0] and
          "in use" in lines[0] and "monitoring is off" in lines[0],
          "busy port: exit %d, %r" % (rc, lines))


try:
    {"kill": case_kill, "concurrent": case_concurrent, "bad-store": case_bad_store,
     "monitor": case_monitor}[case]()
except SystemExit:
    failures += 1
finally:
    for p in procs:
        if p.poll() is None:
            kill_job(p)
    if failures:
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log"):
                print("---- " + f)
                txt = open(os.path.join(tmp, f), errors="replace").read()
                print("\n".join(l for l in txt.splitlines() if "] step" not in l)[-3000:])
    shutil.rmtree(tmp, ignore_errors=True)
print("%s: %s" % (case, "FAILED (%d)" % failures if failures else "passed"))
sys.exit(1 if failures else 0)

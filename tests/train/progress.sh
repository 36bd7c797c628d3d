#!/usr/bin/env bash
# The terminal progress line (train.progress) on real `dtrain train` runs of the tiny Llama.
# `script` (util-linux) gives the trainer a pseudo-terminal as stdout; `stty -onlcr` keeps its
# newlines as "\n", so every "\r" in the capture is the trainer's own.
#   tty    80 steps under a pty (100 columns) with evaluation and checkpoints: "\r"-redrawn
#          segments "step N/80 ... ETA ... ckpt ..." (fields, width, at most ~4 redraws a
#          second, an ETA that agrees with the run's own duration, "ckpt" none until the first
#          commit line and then that step); every other line at column 0 (after "\n", never
#          glued to a segment), the step lines after "\r\033[K"; what a terminal shows is the
#          same step and eval lines as the plain run
#   plain  the same run into a file: no "\r" or escape at all, plain log lines in today's format
#          and the same numbers (training is deterministic)
#   off    train.progress=off under a pty: no "\r"; on: segments even into a file
#   narrow a 40-column pty: segments fit in 39 columns and keep "step" and the ETA
#   mpi    2 MPI ranks under mpirun in a pty (Open MPI gives rank 0 a pty): rank 0 draws, with
#          comm-wait
#   bad    train.progress=maybe: exit 2, one line naming the key and its values
#   progress.sh DTRAIN REPO DATA_DIR [MPIEXEC]
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3 mpiexec=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
command -v script > /dev/null || fail "util-linux script is not installed"
base=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" train.threads=1
      schedule.warmup_steps=5 ckpt.resume=never output.dir="$tmp/runs")
long=(data.val="$data/fortunes/val" train.steps=80 train.log_every=20 train.eval_every=50
      ckpt.every_steps=30)
short=(data.val= data.seq_len=64 data.batch=8 train.steps=6 train.log_every=2)

# in_pty COLUMNS OUT CMD...: CMD with a pseudo-terminal of COLUMNS columns as stdout and stderr
in_pty() {
    local cols=$1 out=$2
    shift 2
    local cmd
    cmd="stty -onlcr cols $cols; exec $(printf '%q ' "$@")"
    local rc=0
    SHELL=/bin/bash script -qfec "$cmd" /dev/null < /dev/null > "$out" || rc=$?
    [ "$rc" = 0 ] || { cat -v "$out"; fail "$* exited with $rc"; }
}

in_pty 100 "$tmp/tty.out" "$dtrain" train "${base[@]}" "${long[@]}" output.run_name=tty
"$dtrain" train "${base[@]}" "${long[@]}" output.run_name=plain > "$tmp/plain.out" 2>&1 ||
    { cat "$tmp/plain.out"; fail "plain run failed"; }
in_pty 100 "$tmp/off.out" "$dtrain" train "${base[@]}" "${short[@]}" train.progress=off \
    output.run_name=off
"$dtrain" train "${base[@]}" "${short[@]}" train.progress=on output.run_name=on \
    > "$tmp/on.out" 2>&1 || { cat "$tmp/on.out"; fail "train.progress=on run failed"; }
in_pty 40 "$tmp/narrow.out" "$dtrain" train "${base[@]}" "${short[@]}" output.run_name=narrow
if [ -n "$mpiexec" ]; then
    OMP_NUM_THREADS=1 in_pty 120 "$tmp/mpi.out" "$mpiexec" --allow-run-as-root --oversubscribe \
        --bind-to none -np 2 "$dtrain" train "${base[@]}" "${short[@]}" train.steps=30 \
        train.log_every=10 output.run_name=mpi
    # mpirun writing to a file: Open MPI still gives the ranks a pty, but the line must not
    # appear (the terminal that counts is mpirun's)
    OMP_NUM_THREADS=1 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        "$dtrain" train "${base[@]}" "${short[@]}" output.run_name=mpifile > "$tmp/mpifile.out" \
        2>&1 || { cat "$tmp/mpifile.out"; fail "mpirun into a file failed"; }
    if grep -q $'\r' "$tmp/mpifile.out"; then fail "mpirun into a file: the output has a \\r"; fi
    grep -q "^step      6/6" "$tmp/mpifile.out" || { cat "$tmp/mpifile.out"; fail "mpirun into a file: no plain step line"; }
fi
rc=0
"$dtrain" train "${base[@]}" train.progress=maybe > "$tmp/bad.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "train.progress=maybe: exit $rc, expected 2"

python3 - "$tmp" "$mpiexec" << 'EOF'
import re, sys
tmp, mpi = sys.argv[1], sys.argv[2]
errors = []
def err(m):
    errors.append(m)
def read(name):
    with open(f"{tmp}/{name}.out", "rb") as f:
        return f.read().decode()

STEP_LINE = re.compile(r"step +(\d+)/(\d+)  epoch (\d+)  loss (\d+\.\d{4})  lr (\S+)  \|g\| (\S+)  "
                       r"\d+ tok/s  data-wait \d+\.\d%(  comm-wait \d+\.\d%)?  \d+s")
OTHER = [re.compile(p) for p in (
    r"dtrain train: llama, \d+ parameters; .* steps; run \S+",
    r"eval  step \d+  loss \d+\.\d{4}  perplexity \S+  top-1 \S+%  \(\d+ tokens\)",
    r"checkpoint step \d+ \(\w+\): snapshot in .*, writing in the background",
    r"checkpoint step (\d+) committed: .*",
    r"memory per worker: .*",
    r"device: (cpu|cuda:\d+) \(train\.device=\w+(: .*)?\)",
    r"model written to \S+",
    r"data\.pack=(concat|docs): \d+ sequences of \d+ tokens, packing efficiency \d+\.\d% \(.*\)")]

def duration(s):  # "5s", "1m05s", "2h03m"
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", s)
    if not m or not s:
        return None
    h, mi, se = (int(x) if x else 0 for x in m.groups())
    return 3600 * h + 60 * mi + se

def parse(name, cols=100, total=None):
    """The capture as a terminal receives it: ("seg", fields, text) for each progress segment,
    ("step", match), ("line", text) for the other lines, in order. Fails on anything glued."""
    text = read(name)
    items = []
    for ln in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        if "\r" not in ln:
            if "\033" in ln:
                err(f"{name}: escape outside a progress segment: {ln!r}")
            m = STEP_LINE.fullmatch(ln)
            items.append(("step", m) if m else ("line", ln))
            continue
        chunks = ln.split("\r")
        if chunks[0]:
            err(f"{name}: text before a progress segment on one line: {ln!r}")
        for i, c in enumerate(chunks[1:]):
            last = i == len(chunks) - 2
            if c.startswith("\033[K") and last:  # a step line replacing the progress line
                m = STEP_LINE.fullmatch(c[3:])
                if not m:
                    err(f"{name}: not a step line after \\r\\033[K: {c!r}")
                items.append(("step", m))
            elif c.endswith("\033[K") and "\033" not in c[:-3] and c.startswith("step "):
                seg = c[:-3]
                if len(seg) > cols - 1:
                    err(f"{name}: segment of {len(seg)} characters in {cols} columns: {seg!r}")
                fields = {}
                for f in seg.split("  "):  # "step 5/80", "25000 tok/s", "done in 7s", ...
                    if f.endswith("/s"):
                        v, _, k = f.partition(" ")
                    elif f.startswith("done in "):
                        k, v = "done", f[8:]
                    else:
                        k, _, v = f.rpartition(" ")
                    fields[k] = v
                items.append(("seg", fields, seg))
            else:
                err(f"{name}: a line glued to a progress segment: {c!r}")
    return items

def segs(items):
    return [i for i in items if i[0] == "seg"]

def check_segments(name, items, total, want_fields):
    ss = segs(items)
    if len(ss) < 3:
        err(f"{name}: {len(ss)} progress segments")
        return ss
    prev = 0
    for _, f, seg in ss:
        st = f.get("step", "")
        m = re.fullmatch(r"(\d+)/(\d+)", st)
        if not m or int(m.group(2)) != total:
            err(f"{name}: bad step field in {seg!r}")
            continue
        if int(m.group(1)) < prev:
            err(f"{name}: step went back in {seg!r}")
        prev = int(m.group(1))
        for k in want_fields:
            if k not in f:
                err(f"{name}: no '{k}' in {seg!r}")
    if prev != total or "done" not in ss[-1][1]:
        err(f"{name}: the last segment is not the finished run: {ss[-1][2]!r}")
    return ss

# --- tty: the long run under a pty
T = 80
tty = parse("tty")
FIELDS = ["step", "epoch", "loss", "tok/s", "data-wait", "ckpt"]
ss = check_segments("tty", tty, T, FIELDS)
for kind, *rest in tty:
    if kind == "line" and not any(p.fullmatch(rest[0]) for p in OTHER):
        err(f"tty: unexpected line (glued or garbled?): {rest[0]!r}")
done = duration(ss[-1][1].get("done", "")) if ss else None
if done is None:
    err("tty: no 'done in' on the last segment")
else:
    # at most ~4 redraws a second, plus one after each line printed in between
    others = sum(1 for i in tty if i[0] != "seg")
    if len(ss) > 4 * (done + 1) + others + 2:
        err(f"tty: {len(ss)} segments in {done}s with {others} other lines: not rate limited")
    # the ETA against the run's own duration (steps take about the same time)
    etas = []
    for _, f, seg in ss:
        s = int(f["step"].split("/")[0])
        if "ETA" not in f or s < 10:
            continue
        eta = duration(f["ETA"])
        want = done * (T - s) / T
        etas.append(eta)
        if eta is None or eta > 3 * want + 3 or eta < want / 3 - 2:
            err(f"tty: implausible ETA at step {s} of a {done}s run: {seg!r}")
    if not etas or max(e or 0 for e in etas) < 2:
        err(f"tty: no ETA of 2s or more in a {done}s run: {etas}")
# "ckpt": none until the first commit line, then the newest committed step
committed, shown = None, []
for it in tty:
    if it[0] == "line":
        m = OTHER[3].fullmatch(it[1])
        if m:
            if committed is not None and shown and shown[-1] != committed:
                err(f"tty: last segment before the next commit shows ckpt {shown[-1]}, not {committed}")
            committed, shown = m.group(1), []
    elif it[0] == "seg":
        c = it[1].get("ckpt")
        if committed is None and c != "none":
            err(f"tty: ckpt {c} before any commit line")
        shown.append(c)
commits = [OTHER[3].fullmatch(i[1]).group(1) for i in tty if i[0] == "line" and OTHER[3].fullmatch(i[1])]
if commits[:2] != ["30", "60"]:
    err(f"tty: commits {commits}, expected 30, 60, ...")
if not any(i[0] == "seg" and i[1].get("ckpt") == "30" for i in tty):
    err("tty: no segment shows ckpt 30")
if not any(i[0] == "seg" and i[1].get("ckpt") == "60" for i in tty):
    err("tty: no segment shows ckpt 60")

# --- plain: the same run into a file
plain_text = read("plain")
if "\r" in plain_text or "\033" in plain_text:
    err("plain: a \\r or an escape in the output of a run into a file")
plain = parse("plain")
for kind, *rest in plain:
    if kind == "line" and not any(p.fullmatch(rest[0]) for p in OTHER):
        err(f"plain: unexpected line: {rest[0]!r}")
for kind, *rest in plain:
    if kind == "step":
        m = rest[0]
        if not m.group(0).startswith("step %6d/%d  " % (int(m.group(1)), T)):
            err(f"plain: step line not in today's format: {m.group(0)!r}")
def record(items):  # deterministic content: step lines' numbers, eval lines, line kinds
    out = []
    for it in items:
        if it[0] == "step":
            out.append(("step",) + it[1].groups()[:6])
        elif it[0] == "line" and it[1].startswith("eval"):
            out.append(("eval", it[1]))
        elif it[0] == "line" and not it[1].startswith("checkpoint"):  # commits are async
            out.append(("line", " ".join(it[1].split()[:2])))
    return out
steps_plain = [r for r in record(plain) if r[0] == "step"]
if [int(r[1]) for r in steps_plain] != [20, 40, 60, 80]:
    err(f"plain: step lines at {[r[1] for r in steps_plain]}, expected 20 40 60 80")
if record(tty) != record(plain):
    err("tty and plain runs differ in step/eval lines:\n  %s\n  %s" % (record(tty), record(plain)))

# --- off under a pty; on into a file
off = read("off")
if "\r" in off or "\033" in off:
    err("off: train.progress=off drew under a pty")
if len(STEP_LINE.findall(off)) != 3:
    err(f"off: expected 3 plain step lines:\n{off}")
on = parse("on")
check_segments("on", on, 6, FIELDS)
if sum(1 for i in on if i[0] == "step") != 3:
    err("on: expected 3 step lines")

# --- narrow terminal
narrow = parse("narrow", cols=40)
for _, f, seg in check_segments("narrow", narrow, 6, ["step"]):
    if "ETA" not in f and "done" not in f:
        err(f"narrow: the ETA was dropped: {seg!r}")

# --- 2 ranks under mpirun
if mpi:
    m_items = parse("mpi", cols=120)
    check_segments("mpi", m_items, 30, FIELDS + ["comm-wait"])
    if sum(1 for i in m_items if i[0] == "step") != 3:
        err("mpi: expected 3 step lines (rank 0 only)")

# --- bad value
bad = read("bad").strip().split("\n")
if len(bad) != 1 or "train.progress" not in bad[0] or "auto, on, off" not in bad[0]:
    err(f"bad: expected one line naming train.progress and its values: {bad}")

for e in errors:
    print("FAIL:", e)
if errors:
    sys.exit(1)
print(f"progress: ok ({len(ss)} segments in a {done}s run; "
      f"{len(segs(narrow))} narrow, mpi {'checked' if mpi else 'skipped'})")
EOF

"""The seed's table for the 8B LoRA run, from the logs bench/eval_llama8b.sh leaves in WORK:
full.log and resume.log (each line prefixed with the Unix time it arrived), full.start and
resume.start (the time each run was started) and plan.json (`dtrain plan --json`).

- seconds per step: the uninterrupted run's step lines, from the second to the last (the first
  step also pays the first-touch of the base's pages), their arrival times' mean spacing;
- tok/s: the tokens of a step (workers x batch x seq) over that;
- peak memory per worker: the run's `memory per worker` line (peak resident, and the PSS sum of
  the host's workers) against the plan's per-worker total;
- checkpoint: the first checkpoint's size, its snapshot time (the step waits for it) and its
  background write;
- start and resume times: from a run's start to its first step line (loading the model and,
  resumed, the checkpoint, plus that first step), and for the resumed run the same less one of
  its own step times (the mean spacing of its step lines).

- the peer (--peer-tok): transformers + PEFT's tok/s for the same step, and dtrain's over it.

    eval_llama8b_table.py --work DIR --np N --seq T --steps S --layers L --total-min M
        [--peer-tok X]"""
import argparse
import json
import os
import re

ap = argparse.ArgumentParser()
for k in ("work",):
    ap.add_argument("--" + k, required=True)
for k in ("np", "seq", "steps", "layers", "total-min"):
    ap.add_argument("--" + k, type=int, required=True)
ap.add_argument("--peer-tok", type=float, default=0.0)
a = ap.parse_args()


def lines(name):
    out = []
    with open(os.path.join(a.work, name), encoding="utf-8", errors="replace") as f:
        for raw in f:
            t, _, text = raw.rstrip("\n").partition(" ")
            out.append((float(t), text))
    return out


def start(name):
    with open(os.path.join(a.work, name), encoding="utf-8") as f:
        return float(f.read().strip())


def step_times(ls):
    return [t for t, x in ls if re.match(r"step\s+\d+/", x)]


def spacing(ts):
    if len(ts) < 2:
        raise SystemExit("eval_llama8b_table: fewer than 2 step lines in a run")
    return (ts[-1] - ts[0]) / (len(ts) - 1)


full, resumed = lines("full.log"), lines("resume.log")
ft = step_times(full)
s_step = spacing(ft[1:]) if len(ft) > 2 else spacing(ft)
tokens = a.np * a.seq  # data.batch=1 per worker, no accumulation
mem = next((x for _, x in full if x.startswith("memory per worker:")), "")
m = re.search(r"peak ([0-9.]+) MiB", mem)
peak_mib = float(m.group(1)) if m else float("nan")
m = re.search(r"the host's \d+ workers? ([0-9.]+) MiB", mem)
host_mib = float(m.group(1)) if m else float("nan")
with open(os.path.join(a.work, "plan.json"), encoding="utf-8") as f:
    plan = json.load(f)
plan_keys = ("total_bytes", "total")
plan_b = next((plan[k] for k in plan_keys if k in plan), None)
if plan_b is None:
    raise SystemExit("eval_llama8b_table: plan.json has no total_bytes: " + ", ".join(plan))
snap = next((x for _, x in full if re.match(r"checkpoint step \d+ \(every_steps\): snapshot", x)), "")
m = re.search(r"snapshot in ([0-9.]+) s", snap)
snap_s = float(m.group(1)) if m else float("nan")
com = next((x for _, x in full if re.match(r"checkpoint step \d+ committed", x)), "")
m = re.search(r"committed: ([0-9.]+) (k?M?G?B) in ([0-9.]+) s", com)
ck_size, ck_write = (f"{m.group(1)} {m.group(2)}", float(m.group(3))) if m else ("?", float("nan"))
rt = step_times(resumed)
first_raw = ft[0] - start("full.start")
if len(rt) >= 2:
    resume_raw = rt[0] - start("resume.start")
    resume_txt = f"{resume_raw:.1f} s ({resume_raw - spacing(rt):.1f} s less one of its steps)"
elif rt:  # one step left to train: its time cannot be told apart from the load's
    resume_raw = rt[0] - start("resume.start")
    resume_txt = f"{resume_raw:.1f} s (load, restore and its only step)"
else:
    resume_txt = "n/a: the run was stopped at its last step, the resumed run trained none"

gib = 2.0 ** 30
print(f"Llama-3.1-8B-Instruct-shaped ({a.layers} layers), LoRA r=16 on all 7 projections, "
      f"recompute, seq {a.seq}, {a.np} workers x batch 1, {a.steps} steps")
print()
print("| figure | value |")
print("|---|---:|")
print(f"| tok/s (all workers) | {tokens / s_step:.1f} |")
print(f"| seconds per step | {s_step:.1f} |")
if a.peer_tok > 0:
    print(f"| transformers + PEFT, the same step, 1 process x {a.np} threads (tok/s) | {a.peer_tok:.1f} |")
    print(f"| dtrain / PEFT | {tokens / s_step / a.peer_tok:.2f} |")
print(f"| peak memory per worker (resident) | {peak_mib / 1024:.2f} GiB |")
print(f"| `dtrain plan` per worker | {plan_b / gib:.2f} GiB |")
print(f"| measured / planned | {peak_mib * 2**20 / plan_b:.3f} |")
print(f"| the host's {a.np} workers, PSS (shared pages once) | {host_mib / 1024:.2f} GiB |")
print(f"| checkpoint size | {ck_size} |")
print(f"| checkpoint snapshot (the step waits) + background write | {snap_s:.2f} s + {ck_write:.2f} s |")
print(f"| start to the first step's line (load, map the base, one step) | {first_raw:.1f} s |")
print(f"| resume: start to the first step's line (load + restore, one step) | {resume_txt} |")
print(f"| whole script | {a.total_min} min |")

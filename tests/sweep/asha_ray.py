#!/usr/bin/env python3
"""ASHA replayed against Ray Tune's own ASHAScheduler (AsyncHyperBandScheduler): the same
metric sequences, reported in the same interleaved order, must give the same stop/continue
decision at every report. Skipped (exit 77) when ray[tune] is not importable.
    asha_ray.py TEST_SWEEP_BINARY"""
import random
import subprocess
import sys
import types

try:
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler
except Exception as e:  # Ray Tune's venv is made by scripts/setup-venv.sh (make test)
    print(f"skip: ray.tune not importable ({e})")
    sys.exit(77)

binary = sys.argv[1]
failures = 0
for case, (grace, max_t, rf) in enumerate([(1, 9, 3), (2, 100, 4), (1, 27, 3), (3, 50, 2)]):
    rng = random.Random(case)
    sched = ASHAScheduler(time_attr="step", metric="loss", mode="min", grace_period=grace,
                          max_t=max_t, reduction_factor=rf, brackets=1)
    trials = [types.SimpleNamespace(trial_id=str(i), config={}) for i in range(12)]
    for t in trials:
        sched.on_trial_add(None, t)
    # every trial reports every step until stopped, in a shuffled interleaving
    alive = {i: 0 for i in range(len(trials))}
    events = []
    while alive:
        i = rng.choice(sorted(alive))
        alive[i] += 1
        step = alive[i]
        v = rng.uniform(0.5, 3.0) / step ** 0.3
        a = sched.on_trial_result(None, trials[i], {"step": step, "loss": v})
        events.append((i, step, v, 0 if a == TrialScheduler.STOP else 1))
        if a == TrialScheduler.STOP:
            del alive[i]
    inp = "".join(f"{i} {s} {v!r}\n" for i, s, v, _ in events)
    out = subprocess.run([binary, "--replay", str(grace), str(max_t), str(rf)], input=inp,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    for (i, s, v, want), line in zip(events, out):
        got = int(line.split()[2])
        if got != want:
            failures += 1
            print(f"case {case}: trial {i} step {s} loss {v}: dtrain {got}, ray {want}")
    stops = sum(1 for e in events if e[3] == 0)
    print(f"case {case} (grace {grace}, max_t {max_t}, rf {rf}): {len(events)} reports, "
          f"{stops} stops compared")
sys.exit(1 if failures else 0)

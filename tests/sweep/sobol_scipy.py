#!/usr/bin/env python3
"""dtrain's Sobol points against scipy.stats.qmc.Sobol(d=24, scramble=False): the first 256
points, exactly (both are dyadic rationals of 32 bits). Skipped (exit 77) without scipy.
    sobol_scipy.py TEST_SWEEP_BINARY"""
import subprocess
import sys

try:
    from scipy.stats import qmc
except Exception as e:
    print(f"skip: scipy not importable ({e})")
    sys.exit(77)

want = qmc.Sobol(d=24, scramble=False).random(256)
out = subprocess.run([sys.argv[1], "--sobol", "256"], capture_output=True, text=True,
                     check=True).stdout.split("\n")
bad = 0
for i in range(256):
    got = [float(x) for x in out[i].split()]
    if got != list(want[i]):
        bad += 1
        if bad < 5:
            print(f"point {i}: dtrain {got[:4]}..., scipy {list(want[i][:4])}...")
print(f"{256 - bad}/256 points equal")
sys.exit(1 if bad else 0)

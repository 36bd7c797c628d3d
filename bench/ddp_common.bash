# Shared by bench_scaling.sh and bench_paired.sh (sourced, not run: `make bench` runs only *.sh).
# Call: ddp_common NAME BUILD_DIR. Sets bin (bench_ddp), py (the venv's python: DT_VENV, else
# ~/.cache/dtrain/venv; py_ok=1 when it has torch and torchvision), root (mpirun's
# --allow-run-as-root when root) and tuned: the environment both sides run in, as in
# bench_models.sh -- both OPENBLAS variables unset (a benchmark's own command may), glibc malloc
# kept from returning memory, one OpenMP thread. Exits 2 with a message when bench_ddp or
# mpirun is missing. First prints the run's date, commit and machine (header.inc).
. "$(dirname "${BASH_SOURCE[0]}")/header.inc"
ddp_common() {
  local name=$1 build=$2
  bench_header
  bin="$build/bench/bench_ddp"
  [[ -x "$bin" ]] || { echo "$name: $bin not found (needs MPI: libopenmpi-dev); build first" >&2; exit 2; }
  command -v mpirun >/dev/null || { echo "$name: mpirun not found (openmpi-bin)" >&2; exit 2; }
  py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
  py_ok=0
  "$py" -c 'import torch, torchvision' 2>/dev/null && py_ok=1
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  tuned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0
         MALLOC_TRIM_THRESHOLD_=100000000000 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=1)
}

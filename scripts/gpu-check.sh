#!/usr/bin/env bash
# The GPU check: build the device library and its tests on a machine with an NVIDIA GPU, run
# them, and record the GPU, the results and the kernel timings (docs/gpu.md).
#
#   scripts/gpu-check.sh [OUT_DIR]        (default: $OUT, else ./gpu-check-out)
#
# Made for a machine with no network: nothing is downloaded. It needs nvcc, CMake, ninja and a C
# compiler, and the Debian libraries dtrain's CPU side links (oneDNN, OpenBLAS, cJSON, PCRE2,
# xxHash, libyaml, zlib, libcurl, OpenSSL, SQLite, libmicrohttpd, TurboJPEG, libpng, libwebp):
# either installed, or unpacked under DT_DEPS_PREFIX (a folder with usr/include, usr/lib/...),
# or, without DT_DEPS_PREFIX, the bundle that scripts/gpu-bundle.sh makes in .gpu-deps (carried
# as .gpu-deps/carry, unpacked here into .gpu-deps/root). MPI is left out (-DCMAKE_DISABLE_FIND_
# PACKAGE_MPI=ON) unless mpirun is found (then the two-rank tests cuda_train_dist_* run too,
# their skips reported but not counted as failures), and so is the CLI (-DDT_CLI=OFF: no cairo needed). DT_GPU_BUILD names the build
# folder (default build-gpu), DT_GPU_JOBS the parallel jobs (default: every core).
# It builds only the device tests and the library (not the CLI or the other tests), for sm_90
# only, then runs ctest -L gpu, then compares the GEMM speed with PyTorch's on the same GPU when
# python3 has torch. Every step's output goes to OUT_DIR; the summary is OUT_DIR/summary.txt.
# Exit status: 0 when every GPU test passed (none skipped), 1 otherwise.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out"
build=${DT_GPU_BUILD:-$repo/build-gpu}
jobs=${DT_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
sum=$out/summary.txt
: >"$sum"
say() { echo "$*" | tee -a "$sum"; }
t0=$(date +%s)

say "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
else
  say "gpu: nvidia-smi not found"
fi
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
if [[ -z "$nvcc_bin" ]]; then
  say "FAIL: nvcc not found (PATH or /usr/local/cuda/bin)"
  exit 1
fi
say "nvcc: $("$nvcc_bin" --version | tail -1)"

# Libraries from a carried prefix (unpacked .deb files, scripts/gpu-bundle.sh). Without
# DT_DEPS_PREFIX, the bundle in .gpu-deps is used when there is one: .gpu-deps/root, else
# .gpu-deps/carry/root.tar.xz (what `run` carries), unpacked into .gpu-deps/root first.
bundle=$repo/.gpu-deps
if [[ -z "${DT_DEPS_PREFIX:-}" && ! -d $bundle/root && -f $bundle/carry/root.tar.xz ]]; then
  if ! tar -C "$bundle" -xJf "$bundle/carry/root.tar.xz" 2>"$out/unpack.log"; then
    say "FAIL: could not unpack $bundle/carry/root.tar.xz (see unpack.log)"
    exit 1
  fi
fi
if [[ -z "${DT_DEPS_PREFIX:-}" && -d $bundle/root ]]; then
  DT_DEPS_PREFIX=$bundle/root
fi
cm_extra=()
lib_path=
if [[ -n "${DT_DEPS_PREFIX:-}" ]]; then
  p=$(cd "$DT_DEPS_PREFIX" && pwd)
  lib=$p/usr/lib/x86_64-linux-gnu
  ob=$lib/openblas-openmp
  lib_path=$lib:$ob
  # pkg-config of the prefix only (its .pc files say /usr: the sysroot puts $p in front). The
  # bundle's pkgconf, through a wrapper that finds its libpkgconf, when the prefix has one.
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$p/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$p
  unset PKG_CONFIG_PATH
  if [[ -x $p/usr/bin/pkgconf ]]; then
    mkdir -p "$build"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib" "$p/usr/bin/pkgconf" \
      >"$build/dt-pkg-config"
    chmod +x "$build/dt-pkg-config"
    cm_extra+=("-DPKG_CONFIG_EXECUTABLE=$build/dt-pkg-config")
  fi
  # OpenBLAS and cblas.h are looked for at fixed Debian paths (CMakeLists.txt): named here. The
  # libraries' own dependencies (libcurl's libnghttp2, ...) are in the prefix too: -rpath-link
  # for the linker, and an RPATH (DT_RPATH, which also serves the libraries' dependencies,
  # unlike RUNPATH) so that the tests run without LD_LIBRARY_PATH.
  cm_extra+=("-DCMAKE_PREFIX_PATH=$p/usr;$lib"
             "-DCMAKE_INCLUDE_PATH=$p/usr/include;$p/usr/include/x86_64-linux-gnu"
             "-DCMAKE_LIBRARY_PATH=$lib;$p/usr/lib"
             "-DOPENBLAS_LIB=$ob/libopenblas.so"
             "-DCBLAS_INCLUDE=$p/usr/include/x86_64-linux-gnu/openblas-openmp"
             "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags,-rpath,$lib_path,-rpath-link,$lib"
             "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags,-rpath,$lib_path,-rpath-link,$lib")
  say "dependencies from DT_DEPS_PREFIX=$p"
  # The bundle is Debian 12's: its libraries need glibc 2.36 or newer (docs/gpu.md).
  gv=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [[ -n $gv ]] && ! printf '2.36\n%s\n' "$gv" | sort -C -V; then
    say "FAIL: glibc $gv here; the Debian 12 libraries of DT_DEPS_PREFIX need 2.36 or newer"
    exit 1
  fi
fi
# cuDNN for the convolutions: DT_CUDNN_ROOT when set; else the toolkit's when it has cudnn.h;
# else PyTorch's (its nvidia-cudnn wheel has include/cudnn.h and lib/libcudnn.so.9). Without
# any, the build has no convolutions and cuda_conv fails (skipped counts as failed here).
if [[ -z "${DT_CUDNN_ROOT:-}" && ! -f $(dirname "$(dirname "$nvcc_bin")")/include/cudnn.h ]]; then
  DT_CUDNN_ROOT=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
fi
if [[ -n "${DT_CUDNN_ROOT:-}" ]]; then
  cm_extra+=("-DDT_CUDNN_ROOT=$DT_CUDNN_ROOT")
  lib_path=$DT_CUDNN_ROOT/lib${lib_path:+:$lib_path}
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Two ranks training on the GPU(s) (cuda_train_dist_host/_nccl, tests/device/cuda_train_dist.c)
# need MPI: built in, and run, only when mpirun is found here.
mpi_opt=(-DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
dist_tests=()
if command -v mpirun >/dev/null; then
  mpi_opt=()
  dist_tests=(cuda_train_dist_host cuda_train_dist_nccl)
fi

# Configure: Release, CUDA on, sm_90 machine code only (the PTX is not needed to run here).
tc=$(date +%s)
if ! cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDT_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES=90-real -DDT_CLI=OFF \
    "${mpi_opt[@]}" "${cm_extra[@]}" \
    >"$out/configure.log" 2>&1; then
  say "FAIL: configure (see configure.log); the first missing piece:"
  grep -m3 -E "Could NOT find|not found|NOTFOUND|Error" "$out/configure.log" | tee -a "$sum"
  say "hint: install the Debian packages of scripts/install-deps.sh, or carry them unpacked and set DT_DEPS_PREFIX"
  exit 1
fi
# Where the main libraries were found (the bundle's, when one is used).
say "libraries: $(grep -E '^(DNNL_LIB|OPENBLAS_LIB|CURL_LIBRARY_RELEASE|SQLite3_LIBRARY):' \
  "$build/CMakeCache.txt" | sed 's/:[A-Z]*=/=/' | tr '\n' ' ')"
say "cudnn: $(grep -m1 -E '^-- cuDNN|cuDNN not found' "$out/configure.log" | sed 's/^-- //')"
# The CUDA kernel tests (tests/device/device.cmake), run once by ctest with their arguments; -V
# keeps every test's output in ctest.log (lines prefixed "N: "), where the timings are read.
cuda_tests=(cuda_device cuda_optim cuda_nn cuda_gemm cuda_rope cuda_embedding cuda_dropout cuda_attention
  cuda_conv cuda_batchnorm cuda_pool cuda_graph_llama cuda_graph_lora cuda_train_llama
  cuda_graph_resnet cuda_train_resnet cuda_optim_dev cuda_train_capture)
targets=(device_cpu "${cuda_tests[@]}")
build_targets=("${targets[@]}")
[[ ${#dist_tests[@]} -gt 0 ]] && build_targets+=(cuda_train_dist)
if ! cmake --build "$build" -j "$jobs" --target "${build_targets[@]}" >"$out/build.log" 2>&1; then
  say "FAIL: build (see build.log):"
  grep -m5 -E "error|FAILED" "$out/build.log" | tee -a "$sum"
  exit 1
fi
say "configure + build: $(($(date +%s) - tc)) s"

# The device tests (label gpu) and the CPU device test; skipped counts as a failure here.
(cd "$build" && LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ctest -R "^($(IFS='|'; echo "${targets[*]}"))\$" \
   -V --timeout 300) >"$out/ctest.log" 2>&1
rc=$?
grep -E "^ *[0-9]+/[0-9]+ Test +#|tests passed|\*\*\*Skipped|\*\*\*Failed|\*\*\*Timeout" "$out/ctest.log" | tee -a "$sum"
# The two-rank runs (mpirun -np 2 under ctest): cuda_train_dist_nccl is skipped with fewer than
# 2 GPUs or no loadable NCCL -- reported in the summary, not counted as a failure; a failure is.
if [[ ${#dist_tests[@]} -gt 0 ]]; then
  (cd "$build" && LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ctest -R "^($(IFS='|'; echo "${dist_tests[*]}"))\$" \
     --output-on-failure -V --timeout 300) >"$out/ctest-dist.log" 2>&1 || rc=1
  grep -E "Test +#|gpu comm:|skipped:" "$out/ctest-dist.log" | tee -a "$sum"
else
  say "cuda_train_dist: not run (no mpirun here)"
fi
gemm=$(grep -m1 -E "^[0-9]+: GEMM" "$out/ctest.log" | sed 's/^[0-9]*: //' || true)
say "dtrain cuBLASLt: ${gemm:-no timing (see ctest.log)}"
grep -m1 "pinned upload" "$out/ctest.log" | sed 's/^[0-9]*: //' | tee -a "$sum"

# PyTorch on the same GPU, same sizes, for the ratio.
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  python3 - >"$out/torch_gemm.log" 2>&1 <<'PY'
import os, torch
n = int(os.environ.get("DT_GEMM_BENCH_N", "8192"))
torch.backends.cuda.matmul.allow_tf32 = True
for name, dt in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
    a = torch.full((n, n), 0.0078, device="cuda", dtype=dt); b = a.clone()
    for _ in range(3): a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10): a @ b
    e.record(); torch.cuda.synchronize()
    print(f"torch {name} {2 * n**3 * 10 / (s.elapsed_time(e) * 1e-3) / 1e12:.1f} TFLOP/s")
PY
  tb=$(awk '/torch bf16/{print $3}' "$out/torch_gemm.log")
  tt=$(awk '/torch tf32/{print $3}' "$out/torch_gemm.log")
  db=$(echo "$gemm" | sed -n 's/.*bf16 \([0-9.]*\).*/\1/p')
  dtf=$(echo "$gemm" | sed -n 's/.*tf32 \([0-9.]*\).*/\1/p')
  say "torch: bf16 ${tb:-?} TFLOP/s, tf32 ${tt:-?} TFLOP/s"
  if [[ -n "$tb" && -n "$db" && -n "$tt" && -n "$dtf" ]]; then
    say "ratio dtrain/torch: bf16 $(awk "BEGIN{printf \"%.2f\", $db/$tb}"), tf32 $(awk "BEGIN{printf \"%.2f\", $dtf/$tt}") (H200 dense bf16 peak: 989 TFLOP/s)"
  fi
else
  say "torch: not available with CUDA; no ratio"
fi
say "total: $(($(date +%s) - t0)) s"
if [[ $rc -ne 0 ]] || grep -q "\*\*\*Skipped" "$out/ctest.log"; then
  say "RESULT: FAIL"
  exit 1
fi
say "RESULT: PASS"

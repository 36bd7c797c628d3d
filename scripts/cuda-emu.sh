#!/usr/bin/env bash
# Runs CUDA kernel tests of tests/device on the CPU, with the kernels of src/device/*.cu
# compiled through a CPU emulation of the CUDA subset they use (scripts/cuda-emu/emu.h): a
# developer check of the kernels' logic where no GPU is at hand. It is not a GPU run (no
# memory model, timing or performance; see emu.h) and not part of CI: the GPU check is
# scripts/gpu-check.sh.
#
#   scripts/cuda-emu.sh BUILD_DIR [TEST...]     (default tests: cuda_rope cuda_embedding
#                                                cuda_dropout cuda_attention cuda_graph_llama
#                                                cuda_graph_lora)
#
# BUILD_DIR: a Ninja build configured with -DDT_CUDA=OFF (e.g. the sanitizer build; then the
# emulated kernels are built with ASan/UBSan too) in which the named test targets are built.
# The tests run on an emulated CUDA device (scripts/cuda-emu/emu_device.c: the CPU backend
# reporting one CUDA device, host memory, and a plain-loop stand-in for the cuBLASLt
# wrapper: f32, and bf16 inputs with f32 accumulation), so that a graph compiled for cuda:0
# takes its CUDA paths (their calls that check that a CPU stream is refused fail here, since
# the emulation accepts it). Needs g++ with C++20 and python3. Exit 0 when every test passed.
# A test's other sources in tests/device (its target's objects in BUILD_DIR/build.ninja) are
# compiled with it. CUDA_EMU_RUN: a command to start each test with (e.g. "mpirun -np 2" for
# cuda_train_dist); CUDA_EMU_ARGS: its arguments (e.g. "mixed .."; run from BUILD_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: scripts/cuda-emu.sh BUILD_DIR [TEST...]}" && pwd)
shift
tests=("$@")
[[ ${#tests[@]} -gt 0 ]] || tests=(cuda_rope cuda_embedding cuda_dropout cuda_attention cuda_graph_llama cuda_graph_lora)
grep -q '^DT_CUDA:BOOL=OFF' "$build/CMakeCache.txt" ||
  { echo "cuda-emu: $build is not a -DDT_CUDA=OFF build" >&2; exit 2; }
san=()
grep -q '^DT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san=("-fsanitize=address,undefined" -fno-omit-frame-pointer)
work=$(mktemp -d "${TMPDIR:-/tmp}/dt-cuda-emu.XXXXXX")
trap 'rm -rf "$work"' EXIT
inc=(-I"$root/scripts/cuda-emu" -I"$work" -I"$root/include" -I"$root/src" -I"$root/tests" -I"$root/tests/device")
# dt_block_sum and dt_block_max, as cuda_common.cuh has them
sed -n '/^\/\* Sum over a block/,/^\/\* The CUDA stream of s/p' "$root/src/device/cuda_common.cuh" |
  sed '$d' >"$work/cuda_common_reductions.inc"
objs=()
for cu in "$root"/src/device/*.cu; do
  b=$(basename "$cu" .cu)
  python3 "$root/scripts/cuda-emu/conv.py" "$cu" "$work/$b.cpp"
  g++ -std=c++20 -O1 -g "${san[@]}" "${inc[@]}" -c "$work/$b.cpp" -o "$work/kern_$b.o"
  objs+=("$work/kern_$b.o") # not $b.o: cuda_nn.cu and the test cuda_nn.c share a name
done
# the emulated CUDA device and GEMM
gcc -std=gnu11 -g "${san[@]}" -D_GNU_SOURCE "${inc[@]}" -c "$root/scripts/cuda-emu/emu_device.c" -o "$work/emu_device.o"
objs+=("$work/emu_device.o")
# cuda_testutil.c with cuda_test_device on the emulated device instead of exiting 77
python3 - "$root/tests/device/cuda_testutil.c" "$work/testutil_cpu.c" <<'PY'
import sys
s = open(sys.argv[1]).read()
i, j = s.index('dt_device cuda_test_device('), s.index('void *cuda_test_upload(')
s = s[:i] + '''dt_device cuda_test_device(const char *test, dt_stream **s) {
    dt_device d = {DT_DEVICE_CUDA, 0};
    printf("%s: on an emulated CUDA device, kernels run on the CPU (scripts/cuda-emu.sh)\\n", test);
    if (dt_stream_create(d, s) != DT_OK) die("stream create");
    return d;
}

''' + s[j:]
open(sys.argv[2], 'w').write(s)
PY
gcc -std=gnu11 -g -fopenmp "${san[@]}" -D_GNU_SOURCE "${inc[@]}" -c "$work/testutil_cpu.c" -o "$work/testutil_cpu.o"
fail=0
for t in "${tests[@]}"; do
  libs=$(grep -A4 "^build tests/$t:" "$build/build.ninja" | sed -n 's/^ *LINK_LIBRARIES = //p')
  [[ -n $libs ]] || { echo "cuda-emu: no link line for tests/$t in $build/build.ninja" >&2; exit 2; }
  libs=${libs//tests\/libdt_testutil.a/$build/tests/libdt_testutil.a}
  libs=${libs// libdtrain.a/ $build/libdtrain.a}
  tobjs=()
  for src in $(grep "^build tests/$t:" "$build/build.ninja" | grep -oE "tests/CMakeFiles/$t\.dir/device/[a-z0-9_]+\.c\.o" |
               sed -E 's|.*/device/([a-z0-9_]+)\.c\.o|\1|' | grep -vx cuda_testutil); do
    gcc -std=gnu11 -g -fopenmp "${san[@]}" -D_GNU_SOURCE "${inc[@]}" -c "$root/tests/device/$src.c" -o "$work/${t}_$src.o"
    tobjs+=("$work/${t}_$src.o")
  done
  # the emulated kernels come first and win over cuda_off.c's refusals in libdtrain.a
  # shellcheck disable=SC2086
  g++ "${san[@]}" -fopenmp -o "$work/$t" "${tobjs[@]}" "$work/testutil_cpu.o" "${objs[@]}" \
    -Wl,--allow-multiple-definition $libs
  # shellcheck disable=SC2086
  if (cd "$build" && ASAN_OPTIONS=detect_leaks=0 DT_GRAPH_POISON=1 ${CUDA_EMU_RUN:-} "$work/$t" ${CUDA_EMU_ARGS:-}); then :; else fail=1; fi
done
exit $fail

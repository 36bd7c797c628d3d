#!/usr/bin/env bash
# Runs the libFuzzer targets of a DT_FUZZ build (tests/fuzz/fuzz.cmake), one after the other:
# first every regression input (tests/fuzz/regress/*/*) through the target, then fuzzing for
# SECONDS from the seed corpus (tests/fuzz/corpus/<target>) plus what earlier runs found
# (BUILD/fuzz-corpus/<target>, where new inputs go; the checked-in seeds are not touched).
# Used by `make fuzz-smoke` (a few seconds per target) and `make fuzz` (FUZZ_SECONDS each).
#
#   tests/fuzz/run.sh [-b BUILD] [-t SECONDS] [-j N] [-o LOGS] [TARGET...]   (TARGET: shard, ...)
#     -b  the DT_FUZZ build directory (default build-fuzz)
#     -o  where logs, crash inputs and summary.md go (default BUILD/fuzz-logs; give two
#         concurrent runs of different targets different directories)
#     -t  seconds of fuzzing per target (default 600; 0: replay the regressions only)
#     -j  fuzzing jobs per target (default 1: the machine is shared)
#
# A crash, leak, UBSan report, timeout (-timeout, default 10 s per input) or an allocation over
# -malloc_limit_mb fails the run: the input is saved as BUILD/fuzz-logs/<target>-crash-* (or
# leak-, timeout-, oom-); minimise it with `BUILD/tests/fuzz_<target> -minimize_crash=1
# -runs=10000 INPUT` and keep it under tests/fuzz/regress/<target>/ once fixed. A summary table
# (executions per second, coverage) is printed and written to BUILD/fuzz-logs/summary.md.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build=build-fuzz
seconds=600
jobs=1
logs=
while getopts "b:t:j:o:" o; do
  case $o in
  b) build=$OPTARG ;;
  t) seconds=$OPTARG ;;
  j) jobs=$OPTARG ;;
  o) logs=$OPTARG ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
bin="$build/tests"
if ! ls "$bin"/fuzz_* >/dev/null 2>&1; then
  echo "run.sh: no fuzz targets in $bin (configure with -DDT_FUZZ=ON, build fuzz_all)" >&2
  exit 2
fi
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$bin"/fuzz_*; do
    n="${f##*/fuzz_}"
    [[ "$n" == *_replay ]] || targets+=("$n")
  done
fi

[ -n "$logs" ] || logs="$build/fuzz-logs"
# the harnesses write their inputs to files: tmpfs when there is one (several times faster)
tmpbase="$build/fuzz-tmp"
[ -w /dev/shm ] && tmpbase="$(mktemp -d /dev/shm/dtrain-fuzz.XXXXXX)"
trap 'rm -rf "$tmpbase"' EXIT
mkdir -p "$logs"
summary="$logs/summary.md"
printf '| target | seconds | executions | exec/s | cov | ft | corpus | result |\n' >"$summary"
printf '|---|---|---|---|---|---|---|---|\n' >>"$summary"
mapfile -t regress < <(find "$here/regress" -type f 2>/dev/null | sort)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=0

for t in "${targets[@]}"; do
  exe="$bin/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "run.sh: $exe missing" >&2
    failed=1
    continue
  fi
  # per-target options: big enough inputs for the file formats that need them
  extra=(-timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=512)
  case $t in
  import_cifar) extra+=(-max_len=16384) ;;
  tokenizer_json) extra+=(-max_len=32768) ;;
  esac
  case $t in
  config) dict=yaml ;;
  http) dict=http ;;
  s3_xml) dict=xml ;;
  shard | store_uri | import_idx | import_cifar) dict=misc ;;
  *) dict=json ;;
  esac
  [ -f "$here/dict/$dict.dict" ] && extra+=(-dict="$here/dict/$dict.dict")
  tmp="$tmpbase/$t"
  rm -rf "$tmp"
  mkdir -p "$tmp" "$build/fuzz-corpus/$t"
  log="$logs/$t.log"
  result=ok
  # 1. the regression inputs (every target gets all of them: cheap, and a crash input of one
  #    format is a hostile input for the others too)
  if [ ${#regress[@]} -gt 0 ]; then
    if ! TMPDIR="$tmp" "$exe" "${extra[@]}" "${regress[@]}" >"$logs/$t.regress.log" 2>&1; then
      echo "FAIL $t: a regression input crashes it (see $logs/$t.regress.log)" >&2
      result="REGRESSION"
      failed=1
    fi
  fi
  # 2. fuzzing
  if [ "$seconds" -gt 0 ]; then
    par=()
    [ "$jobs" -gt 1 ] && par=(-fork="$jobs") # -jobs would redirect the output to ./fuzz-N.log
    TMPDIR="$tmp" nice -n 10 "$exe" "${extra[@]}" "${par[@]}" -max_total_time="$seconds" \
      -print_final_stats=1 -artifact_prefix="$logs/$t-" \
      "$build/fuzz-corpus/$t" "$here/corpus/$t" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      result="CRASH (rc $rc, $(ls -t "$logs/$t"-* 2>/dev/null | grep -v '\.log$' | head -1))"
      failed=1
      echo "FAIL $t: see $log" >&2
      grep -E "ERROR: |runtime error|SUMMARY" "$log" | head -5 >&2
    fi
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    eps=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+')
    ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+')
    corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<<"$last" | cut -d' ' -f2)
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$seconds" "${execs:-?}" \
      "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result" >>"$summary"
    printf '%-16s %8s execs %7s exec/s  cov %5s  ft %6s  %s\n' "$t" "${execs:-?}" "${eps:-?}" \
      "${cov:-?}" "${ft:-?}" "$result"
  else
    printf '%-16s regressions: %s\n' "$t" "$result"
  fi
  rm -rf "$tmp"
done
echo "summary: $summary"
exit $failed

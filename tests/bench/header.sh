#!/bin/sh
# bench/header.inc: every benchmark script prints one line with the date, the commit (marked when
# tracked files differ from it) and the CPU it ran on, so that figures in bench/RESULTS.md can
# name them. Runs the helper from a real git repository under both dash and bash, then checks
# that every bench/*.sh of this checkout calls it (directly or through ddp_common.bash).
#   header.sh REPO_ROOT          exit 77 (skipped) without git
set -eu
root=$1
command -v git >/dev/null 2>&1 || { echo "header.sh: git not found; skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "header.sh: FAIL: $*" >&2; exit 1; }

mkdir -p "$tmp/repo/bench"
cp "$root/bench/header.inc" "$tmp/repo/bench/"
printf '#!/bin/sh\nset -eu\n. "$(dirname "$0")/header.inc"\nbench_header\n' >"$tmp/repo/bench/probe.sh"
git -C "$tmp/repo" init -q
git -C "$tmp/repo" add bench
git -C "$tmp/repo" -c user.name=test -c user.email=test@localhost commit -q -m probe
hash=$(git -C "$tmp/repo" rev-parse --short=7 HEAD)
model=$(sed -n '/^model name/{s/^[^:]*: *//p;q;}' /proc/cpuinfo)
cpus=$(nproc)

run() { # SHELL: the probe's line, with the UTC day before and after it (a run may cross midnight)
  d0=$(date -u +%Y-%m-%d)
  line=$("$@")
  d1=$(date -u +%Y-%m-%d)
}

check() { # COMMIT: what the line must name as the commit
  case "$line" in "probe.sh: $d0"T* | "probe.sh: $d1"T*) ;; *) fail "no 'probe.sh: DATE' start: $line" ;; esac
  case "$line" in *", commit $1, "*) ;; *) fail "commit is not '$1': $line" ;; esac
  case "$line" in *"CPU $model ("*) ;; *) fail "CPU model '$model' missing: $line" ;; esac
  case "$line" in *"; AVX"* | *", no AVX2)"*) ;; *) fail "no ISA: $line" ;; esac
  case "$line" in *" $cpus CPUs, "*) ;; *) fail "CPU count $cpus missing: $line" ;; esac
}

for shell in sh bash; do
  run "$shell" "$tmp/repo/bench/probe.sh"
  check "$hash"
  # from another directory: the helper finds the repository from the script's path
  run sh -c "cd / && $shell '$tmp/repo/bench/probe.sh'"
  check "$hash"
done
echo "# edited" >>"$tmp/repo/bench/probe.sh"
run sh "$tmp/repo/bench/probe.sh"
check "$hash+local changes"
rm -rf "$tmp/repo/.git"
run sh "$tmp/repo/bench/probe.sh"
check unknown

n=0
for s in "$root"/bench/*.sh; do
  n=$((n + 1))
  grep -q '^bench_header$' "$s" || grep -q 'ddp_common ' "$s" ||
    fail "$s prints no header (source bench/header.inc and call bench_header)"
done
grep -q '^  bench_header$' "$root/bench/ddp_common.bash" || fail "ddp_common.bash prints no header"
[ "$n" -gt 0 ] || fail "no bench/*.sh under $root"
echo "header.sh: ok ($n scripts)"

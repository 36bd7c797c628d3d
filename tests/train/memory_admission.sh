#!/usr/bin/env bash
# Memory admission (train.memory_check): a configuration whose plan exceeds the memory this worker
# may use is refused before anything large is allocated, with one line naming the plan, the limit
# and its source, and keys that make it fit -- instead of the kernel's OOM killer ending the run.
#   memory_admission.sh DTRAIN REPO DATA_DIR MPIRUN...
# Cases: MemAvailable (1 rank, and 2 ranks sharing the host), off and warn going past the check,
# a real memory cgroup (v1 memory.limit_in_bytes or v2 memory.max, made below this process's own
# cgroup; skipped where the container does not allow it), and `dtrain plan`'s warning.
# Nothing here can take the machine's memory: the runs that pass the check do so under an
# address-space limit (ulimit -v) or the test's cgroup.
set -u
dtrain=$1 repo=$2 data=$3
shift 3
tmp=$(mktemp -d) cg=
cleanup() { [[ -n "$cg" && -d "$cg" ]] && rmdir "$cg"; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
cfg=$repo/examples/llama-tiny-fortunes.yaml
base=(data.train=$data/fortunes/train data.val= output.dir=$tmp/runs train.steps=1
      schedule.warmup_steps=0 train.threads=1 output.export=false)
plan_gib() { # batch -> the plan's total per worker in GiB, as the message prints it
  "$dtrain" plan "$cfg" "${base[@]}" data.batch=$1 ${2:+-n $2} --json 2>/dev/null |
    python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["total_bytes"] / 2**30))'
}
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
big=40000 # 210 GiB per worker: above any host this test runs on
want=$(plan_gib $big)
awk -v w="$want" -v a="$avail_kb" 'BEGIN { exit !(w * 1048576 > a) }' ||
  { echo "SKIP: this host has more than $want GiB available"; exit 77; }

# 1. One rank: refused at once, exit 2, one line, nothing trained.
out=$(timeout 60 "$dtrain" train "$cfg" "${base[@]}" data.batch=$big 2>&1); rc=$?
[[ $rc -eq 2 ]] || bad "1 rank: exit $rc (want 2): $out"
[[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || bad "1 rank: not one line: $out"
for s in "train.memory_check" "needs $want GiB per worker" "MemAvailable in /proc/meminfo" \
         "data.batch=" "train.memory_check=off"; do
  [[ "$out" == *"$s"* ]] || bad "1 rank: '$s' missing in: $out"
done
[[ "$out" != *"step "* ]] || bad "1 rank: trained: $out"
# the suggested batch must really fit: its plan (exact bytes) at most the available memory,
# which other processes move between this script's reading and dtrain's (2% slack for that)
sb=$(sed -nE 's/.*data\.batch=([0-9]+).*/\1/p' <<< "$out")
plan_b=$("$dtrain" plan "$cfg" "${base[@]}" data.batch=${sb:-0} --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
[[ -n "$sb" ]] && awk -v w="$plan_b" -v a="$avail_kb" 'BEGIN { exit !(w <= a * 1024 * 1.02) }' ||
  bad "1 rank: suggested data.batch=$sb does not fit ($plan_b bytes, $avail_kb kB available)"

asan=0 # AddressSanitizer reserves terabytes: no address-space cap, so no run past the check
ldd "$dtrain" 2>/dev/null | grep -q libasan && asan=1
# 2. off / warn: past the check, the 210 GiB arena is asked for and refused by the address-space
#    limit (a clean "out of memory" from the graph compiler), so the check is what stopped 1.
for mode in off warn; do
  [[ $asan -eq 1 ]] && break
  out=$( (ulimit -v $((8 << 20)); timeout 120 "$dtrain" train "$cfg" "${base[@]}" data.batch=$big \
          train.memory_check=$mode) 2>&1); rc=$?
  [[ $rc -ne 0 && "$out" == *"out of memory"* ]] || bad "$mode: did not pass the check: $out"
  if [[ $mode == off ]]; then
    [[ "$out" != *"train.memory_check:"* ]] || bad "off: still checked: $out"
  else
    [[ "$out" == *"warning: train.memory_check: the memory plan needs $want GiB"* ]] ||
      bad "warn: no warning: $out"
  fi
done

# 3. Two ranks on this host: each gets half of MemAvailable; both stop, and say so.
if [[ $# -gt 0 && -x "$(command -v "$1")" ]]; then
  want2=$(plan_gib $big 2)
  out=$(timeout 120 "$@" -np 2 "$dtrain" train "$cfg" "${base[@]}" data.batch=$big 2>&1); rc=$?
  n=$(grep -c "needs $want2 GiB per worker.*shared by 2 ranks on this host" <<< "$out")
  [[ $rc -ne 0 && $n -eq 2 ]] || bad "2 ranks: exit $rc, $n refusals (want 2): $out"
  [[ "$out" != *"step "* ]] || bad "2 ranks: trained: $out"
fi

# 4. A real memory cgroup of 1 GiB below this process's own.
mounts() { # fstype -> mount points (cgroup: only v1's memory controller)
  awk -v t="$1" '{ split($0, a, " - "); split(a[1], m, " "); split(a[2], f, " ")
    if (f[1] == t && (t != "cgroup" || f[3] ~ /(^|,)memory(,|$)/)) print m[5] }' /proc/self/mountinfo
}
mk_cgroup() {
  local v1 v2
  v1=$(mounts cgroup | head -1)
  if [[ -n "$v1" ]]; then
    cg=$v1$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)/dtrain-admission-$$
    mkdir "$cg" 2>/dev/null && echo $((1 << 30)) > "$cg/memory.limit_in_bytes" 2>/dev/null && return 0
  else
    v2=$(mounts cgroup2 | head -1)
    [[ -n "$v2" ]] || return 1
    cg=$v2$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/dtrain-admission-$$
    mkdir "$cg" 2>/dev/null && echo $((1 << 30)) > "$cg/memory.max" 2>/dev/null && return 0
  fi
  [[ -d "$cg" ]] && rmdir "$cg"
  cg=
  return 1
}
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
if mk_cgroup && in_cg true 2>/dev/null; then
  mid=300 # 1.6 GiB: fits the host, not the cgroup
  want=$(plan_gib $mid)
  awk -v w="$want" 'BEGIN { exit !(w > 1.0 && w < 8) }' || bad "cgroup: plan $want GiB not in (1, 8)"
  out=$(in_cg timeout 60 "$dtrain" train "$cfg" "${base[@]}" data.batch=$mid 2>&1); rc=$?
  [[ $rc -eq 2 && "$out" == *"needs $want GiB per worker"* && "$out" == *"of cgroup "*"limit 1.00 GiB"* ]] ||
    bad "cgroup: exit $rc, want a refusal naming the cgroup's 1.00 GiB: $out"
  [[ "$out" == *"data.batch="* ]] || bad "cgroup: no data.batch suggestion: $out"
  # what the check prevents: past it, the kernel ends the run inside the cgroup (or the
  # allocation fails); either way without the check's message
  if [[ $asan -eq 0 ]]; then
    out=$(in_cg timeout 120 "$dtrain" train "$cfg" "${base[@]}" data.batch=$mid train.memory_check=off 2>&1); rc=$?
    [[ $rc -ne 0 && "$out" != *"train.memory_check:"* ]] || bad "cgroup off: exit $rc: $out"
    echo "cgroup off: exit $rc (137: the OOM killer)"
  fi
  # and a run that fits the cgroup trains
  out=$(in_cg timeout 120 "$dtrain" train "$cfg" "${base[@]}" data.batch=8 2>&1); rc=$?
  [[ $rc -eq 0 && "$out" == *"step "* ]] || bad "cgroup: a small run was refused: exit $rc: $out"
else
  echo "SKIP cgroup case: cannot create a memory cgroup here"
fi

# 5. dtrain plan warns when one worker does not fit this machine, and only then.
out=$("$dtrain" plan "$cfg" "${base[@]}" data.batch=$big -n 1 2>&1 >/dev/null); rc=$?
[[ $rc -eq 0 && "$out" == *"warning: one worker needs $(plan_gib $big) GiB"*"MemAvailable"* ]] ||
  bad "plan: no warning: $out"
out=$("$dtrain" plan "$cfg" "${base[@]}" data.batch=8 -n 1 2>&1 >/dev/null)
[[ -z "$out" ]] || bad "plan: warning for a small plan: $out"
[[ $fail -eq 0 ]] && echo "memory_admission: ok"
exit $fail

#!/usr/bin/env bash
# scripts/install-deps.sh: the demo set is a strict subset of the test set without the test-only
# services and PyTorch, and no unit or init script of an installed listed package is enabled to
# start at boot (static: no systemd runs here; the links it would follow are checked).
#   install_deps_check.sh REPO
set -euo pipefail
s=$1/scripts/install-deps.sh
mapfile -t demo < <(bash "$s" --list-demo)
mapfile -t test < <(bash "$s" --list-test)
fail() { echo "FAIL: $*" >&2; exit 1; }
# A lookup table, not `printf | grep -q`: grep -q exits at its first match, and under pipefail the
# printf that is still writing then dies of SIGPIPE and fails the check at random.
declare -A in_test=()
for p in "${test[@]}"; do in_test[$p]=1; done
for p in "${demo[@]}"; do [[ -n ${in_test[$p]:-} ]] || fail "demo-only $p"; done
((${#demo[@]} < ${#test[@]})) || fail "demo set is not smaller"
for p in "${demo[@]}"; do
  case $p in chromium|prometheus|slurm*|munge|python3-torch*) fail "demo set has $p" ;; esac
done
for p in "${test[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || continue
  while read -r f; do
    case $f in
      */systemd/system/*.service|*/systemd/system/*.socket|*/systemd/system/*.timer)
        u=${f##*/}
        ls /etc/systemd/system/*.wants/"$u" >/dev/null 2>&1 && fail "$p: $u enabled" ;;
      /etc/init.d/*)
        ls /etc/rc?.d/S??"${f##*/}" >/dev/null 2>&1 && fail "$p: ${f##*/} starts at boot" ;;
    esac
  done < <(dpkg -L "$p" 2>/dev/null)
done
echo "install_deps_check: ok (demo ${#demo[@]} packages, test ${#test[@]})"

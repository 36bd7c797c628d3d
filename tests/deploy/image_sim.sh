#!/bin/bash
# A stand-in for `docker build -f deploy/Dockerfile` plus a two-pod MPIJob, for machines without
# a container runtime (docs/deploy.md, section 7). Manual, not in CTest: it downloads about
# 100 MB of Debian packages and needs root, mmdebstrap (apt-get install mmdebstrap) and unshare.
#
#   sudo tests/deploy/image_sim.sh [BUILD_DIR]      # BUILD_DIR: default build (dtrain, train-data)
#
# 1. mmdebstrap --variant=minbase bookworm (what debian:12-slim is made from) with the runtime
#    stage's apt packages, read from deploy/Dockerfile by tests/deploy/test_deploy.py's parser;
# 2. the runtime stage's other RUN steps replayed in the root, and its COPYs (the build stage's
#    binary is BUILD_DIR/dtrain);
# 3. as uid 1000, in private mount, pid and network namespaces: ldd, dtrain version and demo,
#    sshd -t on deploy/docker/sshd_config; then the MPIJob's two roles: `dtrain-k8s worker`
#    (sshd, keys root-owned 0644 as a Secret mounts them) and `dtrain-k8s launcher dtrain
#    launch --hostfile` (host 127.0.0.2, so that mpirun goes through ssh and orted); SIGTERM to
#    the worker wrapper, then to the launcher, must give a checkpoint and exit status 75, the
#    wrapper must exit after the workers, and a second launch must resume from that checkpoint.
# Prints PASS or FAIL lines; exit status 0 when all passed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$REPO/build}" && pwd)
ROOT=${DTRAIN_SIM_ROOT:-/tmp/dtrain-image-sim}
command -v mmdebstrap >/dev/null || {
    echo "image_sim: needs mmdebstrap (apt-get install mmdebstrap)" >&2
    exit 2
}
[[ $(id -u) == 0 ]] || {
    echo "image_sim: needs root (chroot, unshare, mounts)" >&2
    exit 2
}
[[ -x $BUILD/dtrain && -d $BUILD/train-data/fortunes ]] || {
    echo "image_sim: needs $BUILD/dtrain and $BUILD/train-data/fortunes (ctest -R fortunes)" >&2
    exit 2
}

# the runtime stage, as test_deploy.py parses it: apt packages, then RUN and COPY steps
plan=$(cd /tmp && python3 - "$REPO" <<'PY'
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1] + "/tests/deploy")
import test_deploy as t
t.ARGS = type("A", (), {"root": sys.argv[1]})()
st = t.dockerfile()[-1]
steps = []
for w, rest in st["instrs"]:
    if w == "RUN" and "apt-get" not in rest:
        steps.append(["RUN", rest])
    elif w == "COPY":
        frm, srcs, dest = t.copies({"instrs": [(w, rest)]})[0]
        steps += [["COPY", "FROM_BUILD" if frm else s, dest] for s in srcs]
print(json.dumps({"apt": t.apt_packages(st), "steps": steps}))
PY
)
pkgs=$(python3 -c 'import json,sys; print(",".join(json.loads(sys.argv[1])["apt"]))' "$plan")
echo "image_sim: runtime packages: $pkgs"
rm -rf "$ROOT"
mmdebstrap --mode=root --variant=minbase --include="$pkgs" bookworm "$ROOT" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >"$ROOT.log" 2>&1 ||
    { tail "$ROOT.log"; exit 1; }
chroot "$ROOT" sh -c 'rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*'
python3 - "$plan" "$ROOT" "$REPO" "$BUILD" <<'PY'
import json, os, shutil, subprocess, sys
plan, root, repo, build = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
for step in plan["steps"]:
    if step[0] == "RUN":
        subprocess.run(["chroot", root, "sh", "-c", step[1]], check=True)
        continue
    src = os.path.join(build, "dtrain") if step[1] == "FROM_BUILD" else os.path.join(repo, step[1])
    dest = root + step[2]
    os.makedirs(dest if step[2].endswith("/") else os.path.dirname(dest), exist_ok=True)
    if step[2].endswith("/"):
        dest = os.path.join(dest, os.path.basename(src.rstrip("/")))
    (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, dest)
PY
# the SSH key pair as the MPI Operator's Secret mounts it: root-owned, mode 0644, named id_rsa
mkdir -p "$ROOT/home/dtrain/.ssh"
key=$(mktemp -u /tmp/image-sim-key.XXXXXX)
ssh-keygen -q -t ed25519 -N '' -C dtrain -f "$key"
cp "$key" "$ROOT/home/dtrain/.ssh/id_rsa"
cp "$key.pub" "$ROOT/home/dtrain/.ssh/authorized_keys"
rm -f "$key" "$key.pub"
chmod 644 "$ROOT/home/dtrain/.ssh/"*
cp -r "$BUILD/train-data/fortunes" "$ROOT/data/" && chown -R 1000:1000 "$ROOT/data"

# shellcheck disable=SC2016 # the inner script expands its own variables
unshare --mount --pid --net --fork bash -c '
R=$1
mount -t proc proc "$R/proc" && mount --bind /dev "$R/dev" && mount -t tmpfs tmpfs "$R/dev/shm"
mount -t tmpfs tmpfs "$R/tmp" && chmod 1777 "$R/tmp"
ip link set lo up
chroot --userspec=1000:1000 "$R" env -i HOME=/home/dtrain USER=dtrain \
    PATH=/usr/local/bin:/usr/bin:/bin bash -c "
set -u
cd /home/dtrain
ok=0 bad=0
pass() { echo \"PASS \$*\"; ok=\$((ok + 1)); }
fail() { echo \"FAIL \$*\"; bad=\$((bad + 1)); }
[[ \$(ldd /usr/local/bin/dtrain | grep -c \"not found\") == 0 ]] && pass ldd || fail \"ldd: \$(ldd /usr/local/bin/dtrain | grep \"not found\")\"
dtrain version >/dev/null && pass \"dtrain version as \$(id -un)\" || fail \"dtrain version\"
dtrain plan /opt/dtrain/examples/resnet18-fmnist.yaml >/tmp/plan.log 2>&1 && pass \"dtrain plan\" || fail \"dtrain plan: \$(tail -3 /tmp/plan.log)\"
/usr/sbin/sshd -t -f /etc/dtrain/sshd_config && pass \"sshd -t\" || fail \"sshd -t\"
C=\"/opt/dtrain/examples/llama-tiny-fortunes.yaml data.train=/data/fortunes/train data.val=/data/fortunes/val train.steps=2000 schedule.warmup_steps=5 train.log_every=20 train.eval_every=0 ckpt.dir=/ckpt output.dir=/ckpt/runs output.run_name=sim ckpt.every_steps=100000\"
echo \"127.0.0.2 slots=2\" >/tmp/hostfile
export DTRAIN_HOSTFILE=/tmp/hostfile
dtrain-k8s worker 2>/tmp/worker.log & W=\$!
dtrain-k8s launcher dtrain launch -n 2 --hostfile /tmp/hostfile --threads-per-worker 1 \$C >/tmp/launch.log 2>&1 & L=\$!
for i in \$(seq 180); do grep -qs \"step     60\" /tmp/launch.log && break; sleep 1; done
grep -q \"Accepted publickey\" /tmp/worker.log && pgrep -x orted >/dev/null && pass \"workers started through ssh and orted\" || fail \"no ssh login or orted\"
kill -TERM \$W; sleep 2
kill -0 \$W 2>/dev/null && pass \"worker wrapper waits while its workers run\" || fail \"worker wrapper exited at once\"
kill -TERM \$L
wait \$L; rc=\$?
[[ \$rc == 75 ]] && pass \"launch exit status 75 after SIGTERM\" || fail \"launch exit status \$rc: \$(tail -5 /tmp/launch.log)\"
wait \$W; rc=\$?
[[ \$rc == 0 ]] && pass \"worker wrapper exit status 0\" || fail \"worker wrapper exit status \$rc\"
step=\$(ls /ckpt/llama-tiny-fortunes/sim/checkpoints/ 2>/dev/null | tail -1)
[[ -n \$step ]] && pass \"checkpoint \$step\" || fail \"no checkpoint after SIGTERM\"
dtrain-k8s worker 2>/tmp/worker2.log & W=\$!
dtrain-k8s launcher dtrain launch -n 2 --hostfile /tmp/hostfile --threads-per-worker 1 \$C train.steps=140 >/tmp/launch2.log 2>&1
grep -q \"resumed from /ckpt/llama-tiny-fortunes/sim/checkpoints/\$step\" /tmp/launch2.log && pass \"resumed from \$step\" || fail \"no resume: \$(grep -m1 -E \"resumed|no checkpoint\" /tmp/launch2.log)\"
kill -TERM \$W; wait \$W
echo \"image_sim: \$ok passed, \$bad failed\"
exit \$((bad > 0))
"
' bash "$ROOT"

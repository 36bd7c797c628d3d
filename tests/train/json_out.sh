#!/usr/bin/env bash
# `dtrain train --json` (src/cli/train.c, dt_trainer_summary_json): stdout is one JSON object and
# nothing else (the log goes to stderr); its fields agree with what the run left on disk
# (run.json, the checkpoint folder, the exported model) and with the exit code; a refusal is an
# object too (status "refused", exit_code 2, the error naming the key); --json may stand after
# the overrides. `dtrain lora merge --json` refusing a missing base prints its object as well.
#   json_out.sh DTRAIN REPO DATA_DIR
set -euo pipefail
dtrain=$1 repo=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=32 data.batch=4 train.threads=1 train.log_every=1 train.steps=3
      schedule.warmup_steps=0 ckpt.every_steps=2 output.dir="$tmp/runs" output.run_name=j1)
rc=0
"$dtrain" train --json "${args[@]}" > "$tmp/out.json" 2> "$tmp/err.log" || rc=$?
[ "$rc" = 0 ] || { cat "$tmp/err.log"; echo "FAIL: train exited $rc"; exit 1; }
grep -Eq "^step +3/3" "$tmp/err.log" || { echo "FAIL: the log is not on stderr"; exit 1; }
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
text = open(os.path.join(tmp, "out.json")).read()
assert text.count("\n") == 1, "stdout holds more than one line: %r" % text[:400]
o = json.loads(text)
assert o["status"] == "done" and o["exit_code"] == 0, o
assert o["run_name"] == "j1" and os.path.isdir(o["run_dir"]), o["run_dir"]
rec = json.load(open(os.path.join(o["run_dir"], "run.json")))
for k in ("status", "steps_done", "steps_total", "train_loss", "code_revision", "train_data"):
    assert o[k] == rec[k], (k, o[k], rec[k])
assert o["steps_done"] == 3, o["steps_done"]
# the newest checkpoint of this attempt: the end's (step 3), with its commit record
c = o["checkpoint"]
assert c["step"] == 3 and os.path.isfile(os.path.join(c["url"], "trainer_state.json")), c
assert os.path.isfile(os.path.join(o["export"], "model.safetensors")), o.get("export")
assert o["run_id"] >= 1, o
print("train --json: ok")
PY
# a refusal: one object, status refused, exit code 2 in it and of the process
rc=0
"$dtrain" train "${args[@]}" optim.lr=-1 --json > "$tmp/bad.json" 2> "$tmp/bad.err" || rc=$?
[ "$rc" = 2 ] || { cat "$tmp/bad.err"; echo "FAIL: a bad key exited $rc, not 2"; exit 1; }
python3 - "$tmp/bad.json" <<'PY'
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert o["status"] == "refused" and o["exit_code"] == 2, o
assert "optim.lr" in o["error"], o["error"]
print("refusal --json: ok")
PY
rc=0
"$dtrain" lora merge --base "$tmp/none" --adapter "$tmp/none" -o "$tmp/m" --json \
    > "$tmp/merge.json" 2> /dev/null || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: lora merge of a missing base exited $rc, not 2"; exit 1; }
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["exit_code"]==2 and o["status"]=="refused" and o["error"], o; print("lora merge --json: ok")' "$tmp/merge.json"

"""Reads an MLflow file store written by `dtrain runs export --format mlflow` back with MLflow's
own client and compares it with the same run's `dtrain runs export --format json` and `--format
csv` (the store's values as dtrain prints them).

  mlflow_check.py DIR RUN.json RUN.csv RUNS_IN_EXPERIMENT STATUS

Keys that MLflow rejects were renamed by the export (listed in the run's artifact
dtrain_renamed_keys.tsv): every other key must arrive under its own name. Prints the MLflow run
id. Exits non-zero (AssertionError) on the first difference."""
import csv
import json
import math
import os
import sys
import tempfile

os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 keeps the file store in maintenance
os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
from mlflow.tracking import MlflowClient  # noqa: E402

root, json_path, csv_path, n_runs, status = sys.argv[1:6]
d = json.load(open(json_path))
rows = list(csv.DictReader(open(csv_path)))
run = d["run"]


def ms(t):  # C's llround(t * 1000) (Python's round() rounds halves to even)
    return math.floor(t * 1000 + 0.5)


client = MlflowClient(tracking_uri="file://" + os.path.abspath(root))

exps = [e for e in client.search_experiments() if e.name == run["experiment"]]
assert len(exps) == 1, f"experiments named {run['experiment']}: {len(exps)}"
runs = client.search_runs([exps[0].experiment_id], max_results=1000)
assert len(runs) == int(n_runs), f"{len(runs)} runs in the experiment, expected {n_runs}"
mine = [r for r in runs if r.data.tags.get("dtrain.run_id") == str(run["id"])]
assert len(mine) == 1, f"runs with dtrain.run_id {run['id']}: {len(mine)}"
r = client.get_run(mine[0].info.run_id)  # by id, as a reader that knows it would
info, data = r.info, r.data
assert info.run_name == run["name"], (info.run_name, run["name"])
assert info.status == status, (info.status, status)
assert info.start_time == ms(run["start_time"]), (info.start_time, run["start_time"])
if run["end_time"] is None:
    assert info.end_time is None, info.end_time
else:
    assert info.end_time == ms(run["end_time"]), (info.end_time, run["end_time"])

# renamed keys: (folder, dtrain key) -> MLflow key
renamed = {}
with tempfile.TemporaryDirectory() as tmp:
    names = [a.path for a in client.list_artifacts(info.run_id)]
    assert "dtrain_artifacts.tsv" in names and "config.yaml" in names, names
    if "dtrain_renamed_keys.tsv" in names:
        p = client.download_artifacts(info.run_id, "dtrain_renamed_keys.tsv", tmp)
        for line in open(p).read().splitlines()[1:]:
            folder, key, new = line.split("\t")
            renamed[folder, key] = new
    p = client.download_artifacts(info.run_id, "dtrain_artifacts.tsv", tmp)
    arts = [line.split("\t") for line in open(p).read().splitlines()[1:]]
    # the list names what exists: a checkpoint removed later (here attempt 1's step 10, whose
    # folder the resumed attempt 2 replaced: retention drops an abandoned timeline) is left out
    want = [(a["kind"], str(a["step"]), str(a["attempt"]), a["uri"]) for a in d["artifacts"]
            if a["removed"] is None]
    assert [tuple(a[:4]) for a in arts] == want, (arts, want)


def name(folder, key):
    return renamed.get((folder, key), key)


params = d["params"]
assert len(data.params) == len(params), (len(data.params), len(params))
for k, v in params.items():
    assert data.params.get(name("params", k)) == v, (k, name("params", k), v)

tags = data.tags
assert tags["mlflow.runName"] == run["name"], tags
assert tags["mlflow.source.git.commit"] == d["lineage"]["code_version"], tags
assert tags["dtrain.attempts"] == str(run["attempts"]), tags
for k, v in d["lineage"].items():
    if k != "code_version":
        assert tags[name("tags", "dtrain." + k)] == v, (k, v)
for k, v in d["tags"].items():
    assert tags[name("tags", k)] == v, (k, name("tags", k), v)

# metric histories: every value of every attempt, in the store's order
# (the csv's wall has 6 decimals: timestamps come from the json's exact copy of the same rows)
assert len(rows) == len(d["metrics"]), (len(rows), len(d["metrics"]))
by_key = {}
for row, m in zip(rows, d["metrics"]):
    assert (row["key"], int(row["step"])) == (m["key"], m["step"]), (row, m)
    by_key.setdefault(row["key"], []).append(dict(row, wall=m["wall"]))
assert len(data.metrics) == len(by_key), (sorted(data.metrics), sorted(by_key))
n_values = 0
for key, want in by_key.items():
    hist = client.get_metric_history(info.run_id, name("metrics", key))
    assert len(hist) == len(want), (key, len(hist), len(want))
    for m, w in zip(hist, want):
        assert m.step == int(w["step"]), (key, m.step, w)
        assert m.timestamp == ms(w["wall"]), (key, m.timestamp, w)
        if w["value"] == "":  # NaN
            assert math.isnan(m.value), (key, m.value, w)
        else:
            assert m.value == float(w["value"]), (key, m.value, w)
    n_values += len(hist)
assert n_values == len(rows)
steps = [int(w["step"]) for w in by_key.get("loss", [])]
print(f"mlflow ok: run {info.run_id} {info.status}, {len(params)} params, {len(by_key)} metric "
      f"keys, {n_values} values (loss steps {steps}), {len(renamed)} renamed keys")
print(info.run_id)

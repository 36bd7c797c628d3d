#!/usr/bin/env bash
# `dtrain runs plot` on the store that two real `dtrain train` runs of the tiny Llama write
# (optim.lr 0.003 and 0.001):
#   - both runs, --metric loss,lr, to SVG and PNG. The SVG (python3's xml.etree) has one <path
#     class="curve"> per (run, metric) and no other path, legend entries naming both runs, a
#     title, one panel per metric stacked downwards, axis titles and grid lines; each curve has
#     one point per logged value of the store, and the points of a panel are one affine map of
#     (step, value) (x growing with the step, y with the value decreasing); its tick labels are
#     evenly spaced round numbers (1, 2 or 5 times a power of ten apart) placed by the same map
#     and enclosing the data. The PNG (the venv's Pillow) is twice the SVG's size, not blank,
#     and shows each curve's colour; it is kept in OUT_DIR.
#   - a run with a second attempt that repeats steps, with NaN and inf values (rows added to a
#     copy of the store): one curve by step, the latest attempt's value winning, gaps at NaN/inf,
#     a lone value drawn as a dot; a metric only one run has: a warning naming the other run.
#   - errors: unknown run, unknown metric (1), a .jpg output (2), an unwritable path (1): one
#     line naming the culprit, no file written.
#   runs_plot.sh DTRAIN REPO DATA_DIR OUT_DIR      (exit 77: Pillow missing, PNG not decoded)
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3 out=$4
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
mkdir -p "$out"
# an ASan build of dtrain: fontconfig leaks part of its config file parse (FcInitLoadConfigAndFonts
# under cairo's first text), which no caller can free; any other leak still fails
printf 'leak:libfontconfig.so\n' > "$tmp/lsan.supp"
export LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp:print_suppressions=0
rm -f "$out"/plot.svg "$out"/plot.png "$out"/merged.svg
db="$tmp/runs/dtrain.db"
exp=llama-tiny-fortunes
for r in 1 2; do
    lr=$([ $r = 1 ] && echo 0.003 || echo 0.001)
    "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" \
        data.val="$data/fortunes/val" data.seq_len=32 data.batch=4 train.threads=1 \
        schedule.warmup_steps=2 train.log_every=5 train.steps=20 ckpt.resume=never \
        optim.lr=$lr output.run_name=r$r output.dir="$tmp/runs" > "$tmp/r$r.log" 2>&1 ||
        { cat "$tmp/r$r.log"; fail "run r$r failed"; }
done

# ---- both runs, loss and lr, SVG and PNG ------------------------------------------------------
"$dtrain" runs plot $exp/r1,r2 --metric loss,lr --db "$db" -o "$out/plot.svg" > "$tmp/o" 2> "$tmp/e" ||
    { cat "$tmp/o" "$tmp/e"; fail "plot to svg"; }
[ ! -s "$tmp/e" ] || { cat "$tmp/e"; fail "plot to svg wrote to stderr"; }
"$dtrain" runs plot r1 $exp/r2 --metric loss,lr --output-dir "$tmp/runs" -o "$out/plot.png" ||
    fail "plot to png"

# check.py SVG DB SPEC: SPEC is 'metric:run,run;metric:run' (the curves expected per panel),
# run names as in the store; optional 'merged' checks the hand-made resume below.
cat > "$tmp/check.py" << 'EOF'
import math, re, sqlite3, sys, xml.etree.ElementTree as ET
svg, db, spec = sys.argv[1:4]
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(svg).getroot()  # raises on invalid XML
assert root.tag == NS + "svg", root.tag
con = sqlite3.connect(db)
EXP = "llama-tiny-fortunes"

def stored(run, key):
    """The store's values by step: latest attempt wins (the rule plot must follow)."""
    rows = con.execute("SELECT m.step, m.value FROM metrics m JOIN runs r ON r.id = m.run_id"
                       " WHERE r.name = ? AND m.key = ? ORDER BY m.attempt, m.step, m.rowid",
                       (run, key)).fetchall()
    by = {}
    for step, v in rows:
        by[step] = float("nan") if v is None else v
    return sorted(by.items())

def parse_d(d):
    toks = re.findall(r"[MLZ]|-?[0-9.]+", d)
    pts, subs, i = [], [], 0
    while i < len(toks):
        t = toks[i]
        if t == "Z":
            subs[-1].append("Z"); i += 1; continue
        assert t in "ML", d
        if t == "M": subs.append([])
        x, y = float(toks[i + 1]), float(toks[i + 2])
        pts.append((x, y)); subs[-1].append((x, y)); i += 3
    return pts, subs

def nice(step):
    m = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(abs(m - c) < 1e-6 for c in (1, 2, 5))

panels = root.findall(NS + "g")
want = [(p.split(":")[0], p.split(":")[1].split(",")) for p in spec.split(";")]
assert [g.get("data-metric") for g in panels] == [k for k, _ in want], \
    [g.get("data-metric") for g in panels]
assert len(root.findall(".//" + NS + "path")) == sum(len(r) for _, r in want), "extra paths"
texts = lambda g, cls: [t for t in g.iter(NS + "text") if t.get("class") == cls]
runs = sorted({r for _, rs in want for r in rs})
legend = sorted(t.text for t in texts(root, "legend"))
assert legend == [f"{EXP}/{r}" for r in runs], legend
title = texts(root, "title")
assert len(title) == 1 and all(k in title[0].text for k, _ in want), [t.text for t in title]
ids, last_bottom = set(), -1
for g, (key, rs) in zip(panels, want):
    frame = g.find(NS + "rect")
    fx, fy, fw, fh = (float(frame.get(a)) for a in ("x", "y", "width", "height"))
    assert fy > last_bottom, "panels are not stacked downwards"
    last_bottom = fy + fh
    assert [t.text for t in texts(g, "panel-title")] == [key]
    assert sorted(t.text for t in texts(g, "axis-title")) == sorted(["step", key])
    curves = g.findall(NS + "path")
    assert sorted(c.get("data-run") for c in curves) == sorted(f"{EXP}/{r}" for r in rs)
    S, V, X, Y = [], [], [], []
    for c in curves:
        assert c.get("class") == "curve" and c.get("data-metric") == key
        assert c.get("id") not in ids; ids.add(c.get("id"))
        run = c.get("data-run").split("/")[1]
        vals = [(s, v) for s, v in stored(run, key) if math.isfinite(v)]
        pts, subs = parse_d(c.get("d"))
        assert len(pts) == len(vals) > 0, (run, key, len(pts), len(vals))
        if len(sys.argv) > 4 and run == "r1" and key == "loss":  # the hand-made resume
            assert [len([p for p in s if p != "Z"]) for s in subs] == [5, 1, 1], subs
            assert [s[-1] == "Z" for s in subs] == [False, True, True], subs
        for (s, v), (x, y) in zip(vals, pts):
            assert fx - 0.01 <= x <= fx + fw + 0.01 and fy - 0.01 <= y <= fy + fh + 0.01
            S.append(s), V.append(v), X.append(x), Y.append(y)
    # a value alone between gaps is a closed one-point subpath (a dot) and a disc on top
    lone = sorted(s[0] for c in curves for s in parse_d(c.get("d"))[1] if s[-1] == "Z")
    dots = sorted((float(e.get("cx")), float(e.get("cy"))) for e in g.iter(NS + "circle"))
    assert dots == lone, (key, dots, lone)
    # x and y are one affine map of step and value for every curve of the panel
    i, j = S.index(min(S)), S.index(max(S))
    a = (X[j] - X[i]) / (S[j] - S[i]); b = X[i] - a * S[i]
    i, j = V.index(min(V)), V.index(max(V))
    c = (Y[j] - Y[i]) / (V[j] - V[i]); d = Y[i] - c * V[i]
    assert a > 0 and c < 0, (a, c)
    for s, v, x, y in zip(S, V, X, Y):
        assert abs(a * s + b - x) < 0.02 and abs(c * v + d - y) < 0.02, (key, s, v, x, y)
    # tick labels: round, evenly spaced, placed by the same map, enclosing the data
    for cls, lo, hi, slope, pos in (("ytick", min(V), max(V), c, "y"), ("xtick", min(S), max(S), a, "x")):
        tk = texts(g, cls)
        vs = [float(t.text) for t in tk]
        ps = [float(t.get(pos)) for t in tk]
        assert len(vs) >= 3, (cls, vs)
        steps = [q - p for p, q in zip(vs, vs[1:])]
        assert all(abs(s - steps[0]) < 1e-9 * max(1, abs(steps[0])) for s in steps) and steps[0] > 0, vs
        assert nice(steps[0]), (cls, steps[0])
        assert all(abs(v / steps[0] - round(v / steps[0])) < 1e-6 for v in vs), vs
        assert vs[0] <= lo + 1e-12 and vs[-1] >= hi - 1e-12, (cls, vs, lo, hi)
        for p, q, u, w in zip(vs, vs[1:], ps, ps[1:]):
            assert abs((w - u) / (q - p) - slope) < 0.01 * abs(slope), (cls, vs, ps, slope)
    n_grid = sum(1 for l in g.iter(NS + "line") if l.get("class") == "grid")
    assert n_grid == len(texts(g, "xtick")) + len(texts(g, "ytick")), n_grid
    print(f"panel {key}: {len(curves)} curves, {len(S)} points;"
          f" y ticks {[t.text for t in texts(g, 'ytick')]}")
print("svg ok:", root.get("width"), "x", root.get("height"))
EOF
python3 "$tmp/check.py" "$out/plot.svg" "$db" "loss:r1,r2;lr:r1,r2" || fail "svg check"

# ---- a resumed run, NaN/inf gaps, a metric of one run only ------------------------------------
# attempt 2 of r1 repeats steps 10-20 with other values, then 25, NaN at 30, 35 alone, inf at 40,
# 45 alone: 7 points in 3 subpaths (5, dot, dot)
db2="$tmp/merged.db"
python3 - "$db" "$db2" << 'EOF'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
rid = dst.execute("SELECT id FROM runs WHERE name = 'r1'").fetchone()[0]
rows = [(10, 9.0), (15, 8.5), (20, 8.75), (25, 7.0), (30, None), (35, 7.5), (40, float("inf")),
        (45, 6.0)]
dst.executemany("INSERT INTO metrics(run_id, key, step, wall, value, attempt) VALUES(?, 'loss', ?, 0, ?, 2)",
                [(rid, s, v) for s, v in rows])
dst.executemany("INSERT INTO metrics(run_id, key, step, wall, value, attempt) VALUES(?, 'only_r1', ?, 0, ?, 1)",
                [(rid, s, s * 0.5) for s in (1, 2, 3)])
dst.execute("UPDATE runs SET attempts = 2 WHERE id = ?", (rid,))
dst.commit()
EOF
"$dtrain" runs plot r1,r2 --metric loss,only_r1 --db "$db2" -o "$out/merged.svg" 2> "$tmp/e" ||
    { cat "$tmp/e"; fail "plot of the resumed run"; }
cat "$tmp/e"
[ "$(wc -l < "$tmp/e")" = 1 ] && grep -q "warning: .*$exp/r2.*'only_r1'" "$tmp/e" ||
    fail "expected one warning naming r2 and only_r1"
python3 "$tmp/check.py" "$out/merged.svg" "$db2" "loss:r1,r2;only_r1:r1" merged ||
    fail "svg check of the resumed run"

# ---- errors ---------------------------------------------------------------------------------
expect() { # RC WORD ARGS...: exits RC with one stderr line naming WORD, writes no file
    local want=$1 word=$2 rc=0
    shift 2
    "$dtrain" runs plot "$@" --db "$db" > /dev/null 2> "$tmp/e" || rc=$?
    [ $rc = "$want" ] && [ "$(wc -l < "$tmp/e")" = 1 ] && grep -qF -- "$word" "$tmp/e" &&
        grep -q "^dtrain runs plot: " "$tmp/e" ||
        fail "plot $*: rc $rc (want $want), stderr: $(cat "$tmp/e")"
    echo "  $* -> $rc: $(cat "$tmp/e")"
}
expect 1 nope r1,nope -o "$tmp/x.svg"
expect 1 "'nope'" r1,r2 --metric loss,nope -o "$tmp/x.svg"
expect 2 "$tmp/x.jpg" r1 -o "$tmp/x.jpg"
expect 1 "$tmp/no/such/dir/x.png" r1 -o "$tmp/no/such/dir/x.png"
[ ! -e "$tmp/x.svg" ] && [ ! -e "$tmp/x.jpg" ] || fail "a failed plot wrote a file"
"$dtrain" runs plot r2 --db "$db" -o "$tmp/default.svg" > /dev/null || fail "default metric"
python3 "$tmp/check.py" "$tmp/default.svg" "$db" "loss:r2" > /dev/null || fail "default: loss"

# ---- the PNG ----------------------------------------------------------------------------------
echo "PNG kept at $(readlink -f "$out/plot.png")"
if ! [ -x "$py" ] || ! "$py" -c "import PIL" 2> /dev/null; then
    echo "SKIP the PNG check: no Pillow in $py (scripts/setup-venv.sh)"
    exit 77
fi
"$py" - "$out/plot.png" "$out/plot.svg" << 'EOF' || fail "png check"
import sys, xml.etree.ElementTree as ET
from PIL import Image
im = Image.open(sys.argv[1])
im.load()
root = ET.parse(sys.argv[2]).getroot()
w, h = int(root.get("width")), int(root.get("height"))
assert im.format == "PNG" and im.size == (2 * w, 2 * h), (im.format, im.size, w, h)
px = im.convert("RGB")
colours = px.getcolors(maxcolors=1 << 20)
assert colours and len(colours) >= 8, f"{len(colours or [])} colours: blank?"
white = sum(n for n, c in colours if c == (255, 255, 255))
share = 1 - white / (im.size[0] * im.size[1])
assert 0.01 < share < 0.5, f"{share:.3f} of the pixels drawn"
have = {c for _, c in colours}
for p in root.iter("{http://www.w3.org/2000/svg}path"):
    s = p.get("stroke").lstrip("#")
    rgb = tuple(int(s[i:i + 2], 16) for i in (0, 2, 4))
    assert rgb in have, f"curve colour {rgb} of {p.get('id')} not in the PNG"
print(f"png ok: {im.size[0]}x{im.size[1]}, {len(colours)} colours, {share:.1%} drawn")
EOF
echo "ok"

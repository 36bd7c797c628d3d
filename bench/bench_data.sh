#!/bin/sh
# Data pipeline: loader throughput with 0/1/2 prefetch threads beside the raw sequential read of
# the same shards (Fashion-MNIST imported from Debian's dataset-fashion-mnist), and tokenizer
# MB/s beside tiktoken's (single-threaded, cl100k_base, same texts: the multilingual test corpus
# and Debian's fortunes).
# Usage: bench/bench_data.sh [BUILD_DIR=build]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
BIN="$BUILD/bench/bench_data"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
[ -x "$BIN" ] || { echo "bench_data.sh: $BIN not found; build first (cmake --build $BUILD)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TEXTS=""
if [ -x "$PY" ]; then
  PYTHONPATH="$ROOT/tests/ref" "$PY" -c "
import ref_tok_corpus as c
open('$TMP/multilingual.txt', 'w', encoding='utf-8', newline='').write('\n'.join(c.make_lines()) + '\n')"
  TEXTS="$TMP/multilingual.txt"
fi
if [ -d /usr/share/games/fortunes ]; then
  find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort | xargs cat | grep -av '^%$' > "$TMP/fortunes.txt" || true
  TEXTS="$TEXTS $TMP/fortunes.txt"
fi
ARGS=""
for t in $TEXTS; do ARGS="$ARGS --text $t"; done
"$BIN" --tokenizer "$ROOT/data/tokenizers/cl100k_base.tiktoken" $ARGS
if [ -x "$PY" ] && [ -n "$TEXTS" ]; then
  "$PY" "$ROOT/bench/bench_data_tiktoken.py" "$ROOT/data/tokenizers" $TEXTS
else
  echo "tiktoken: no virtual environment at $PY (set DT_VENV); skipped"
fi

#!/bin/sh
# Dataset read throughput, local directory vs SeaweedFS's S3 gateway: Fashion-MNIST's train split
# (imported from Debian's dataset-fashion-mnist), every file read in 1 MiB ranged reads with 1
# and 4 threads (bench/bench_store_read.c); prints MB/s of both and the ratio.
# (the bucket is made with curl's SigV4 signing, as dt_store signs its requests)
# Usage: bench/bench_store_read.sh [BUILD_DIR=build]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$BUILD/bench/bench_store_read"
[ -x "$BIN" ] || { echo "bench_store_read.sh: $BIN not found; build first" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$BUILD/dtrain" data import fashion-mnist ${DT_FMNIST_DIR:-/usr/share/datasets/fashion-mnist} -o "$TMP/fm" >/dev/null
bash "$ROOT/tests/storage/seaweed.sh" run -- sh -c \
  "curl -sf --aws-sigv4 aws:amz:\${AWS_REGION:-us-east-1}:s3 -u \"\$AWS_ACCESS_KEY_ID:\$AWS_SECRET_ACCESS_KEY\" -X PUT \"\$AWS_ENDPOINT_URL/\$DT_S3_BUCKET\" >/dev/null; exec '$BIN' '$TMP/fm/train' \"s3://\$DT_S3_BUCKET/fm-train\""

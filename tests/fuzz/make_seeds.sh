#!/usr/bin/env bash
# Writes the generated seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/gen-*
# (the hand-written text seeds there are kept as they are). Deterministic: running it again
# rewrites the same bytes. Binary seeds (IDX, CIFAR, shards, safetensors) are made here rather
# than committed as opaque blobs; the dataset seeds (shards, manifests) come from
# `dtrain data import` of tiny generated sources, so they are exactly what the writer produces.
#
#   tests/fuzz/make_seeds.sh [path/to/dtrain]     (default: build/dtrain; without it the
#                                                  dataset seeds are skipped)
# Input formats (FZ_SEP = "FUZZSPLIT" between files, control bytes) are described at the top of
# each tests/fuzz/fuzz_<target>.c.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
corpus="$here/corpus"
dtrain="${1:-${DTRAIN:-$root/build/dtrain}}"
mkdir -p "$corpus"
rm -f "$corpus"/*/gen-*

python3 - "$corpus" "$root" <<'EOF'
import gzip, json, os, struct, sys, base64
corpus, root = sys.argv[1], sys.argv[2]
SEP = b"FUZZSPLIT"

def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "gen-" + name), "wb") as f:
        f.write(data)

def copy(target, name, path):
    with open(os.path.join(root, path), "rb") as f:
        put(target, name, f.read())

# ---- safetensors
def st(tensors, meta=None, pad=0):
    h, off, blob = {}, 0, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dtype, shape, size in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        blob += bytes((i * 7 + len(name)) & 255 for i in range(size))
        off += size
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * pad
    return struct.pack("<Q", len(hj)) + hj + blob

put("safetensors", "f32-bf16", st([("a", "F32", [2, 2], 16), ("b", "BF16", [3], 6)], {"format": "pt"}))
put("safetensors", "dtypes", st([("f16", "F16", [2], 4), ("i64", "I64", [], 8), ("e", "F32", [0, 5], 0),
                                 ("i32", "I32", [1, 1, 2], 8)]))
put("safetensors", "unsupported-dtype", st([("f64", "F64", [1], 8)]))
put("safetensors", "meta-only", st([], {"format": "pt", "note": "x"}))
put("safetensors", "aligned", st([("w", "F32", [4], 16)], None, pad=6))

# ---- safetensors index (fuzz_st_index.c: shard = 1 + len(name) % 2)
names = ["model.embed_tokens.weight"]
for s in ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
          "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"]:
    names.append("model.layers.0." + s)
names.append("model.norm.weight")
wm = {n: "model-%05d-of-00002.safetensors" % (1 + len(n) % 2) for n in names}
put("st_index", "valid.json", json.dumps({"metadata": {"total_size": 1000}, "weight_map": wm}, indent=2))
wm2 = dict(wm)
wm2["lm_head.weight"] = "model-00001-of-00002.safetensors"
put("st_index", "extra-tensor.json", json.dumps({"weight_map": wm2}))
put("st_index", "one-file.json", json.dumps({"weight_map": {n: "model-00001-of-00002.safetensors" for n in names}}))

# ---- config.json, tokenizer.json, config YAML: the examples
for d in ["llama-tiny", "llama-small", "llama3.1-8b"]:
    copy("llama_config", d + ".json", "examples/%s/config.json" % d)
put("llama_config", "rope-params.json", json.dumps({
    "model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "eos_token_id": [1, 2, 3], "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}}))
for d in ["llama-tiny"]:  # llama-small has no committed tokenizer.json (lora_demo.sh makes it)
    copy("tokenizer_json", d + ".json", "examples/%s/tokenizer.json" % d)
copy("tiktoken", "cl100k-meta", "data/tokenizers/cl100k_base.json")  # a meta file as rank file
# SentencePiece-style (byte fallback, normalizer, Metaspace, SP decoders): two configurations
SP_VOCAB = dict([("<unk>", 0), ("<s>", 1)] + [("<0x%02X>" % b, 2 + b) for b in range(256)] +
                [("\u2581", 258), ("a", 259), ("b", 260), ("\u2581a", 261), ("ab", 262)])
SP_MODEL = {"type": "BPE", "vocab": SP_VOCAB, "merges": [["\u2581", "a"], ["a", "b"]],
            "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True}
SP_ADDED = [{"id": 1, "content": "<s>", "special": True, "normalized": False,
             "single_word": False, "lstrip": False, "rstrip": False}]
put("tokenizer_json", "sp-llama2.json", json.dumps({
    "added_tokens": SP_ADDED, "model": SP_MODEL,
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}))
put("tokenizer_json", "sp-metaspace.json", json.dumps({
    "added_tokens": SP_ADDED, "model": SP_MODEL,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                      "split": True},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}]}}))
for y in ["llama-tiny-fortunes", "llama3.1-8b-lora", "resnet18-fmnist", "resnet152",
          "llama-small-lora-definitions"]:
    copy("config", y + ".yaml", "examples/%s.yaml" % y)
with open(os.path.join(root, "examples/resnet18-fmnist.yaml"), "rb") as f:
    put("config", "overrides", f.read() + SEP + b"model.width=8" + SEP + b"train.epochs=1" +
        SEP + b"optim.lr = 0.1" + SEP + b"lora.targets=q,v")

# ---- tiktoken: the 256 single bytes and a few merges; with and without the meta JSON
def b64(b):
    return base64.b64encode(b).decode()
ranks = "".join("%s %d\n" % (b64(bytes([i])), i) for i in range(256))
merges = ["th", "he", "the", " t", "in", "er", "\n\n", "an", "ing"]
ranks += "".join("%s %d\n" % (b64(m.encode()), 256 + i) for i, m in enumerate(merges))
put("tiktoken", "bytes", ranks)
meta = {"name": "fuzz", "pat_str": "\\s+|\\S+", "special_tokens": {"<|endoftext|>": 300, "<|eot_id|>": 301}}
put("tiktoken", "bytes-meta", ranks.encode() + SEP + json.dumps(meta).encode())

# ---- IDX (fuzz_import_idx.c): control byte, train images, labels, t10k images, labels
def idx3(n, h, w):
    return struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 37) & 255 for i in range(n * h * w))
def idx1(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)
files = [idx3(4, 3, 2), idx1([0, 1, 9, 5]), idx3(2, 3, 2), idx1([3, 4])]
put("import_idx", "plain", b"\x00" + SEP.join(files))
put("import_idx", "gzip-val", b"\x03" + SEP.join(gzip.compress(f, mtime=0) for f in files))
put("import_idx", "max-records", b"\x04" + SEP.join(files))

# ---- CIFAR-10 (fuzz_import_cifar.c): control byte, data_batch_1, test_batch, data_batch_2
def cifar(labels):
    return b"".join(bytes([l]) + bytes((i * 13 + l) & 255 for i in range(3072)) for l in labels)
put("import_cifar", "flat", b"\x00" + cifar([1, 7]) + SEP + cifar([2]))
put("import_cifar", "nested-val", b"\x03" + cifar([0, 9]) + SEP + cifar([5]) + SEP + cifar([4]))

# ---- text / JSONL (fuzz_import_text.c): control byte, up to three files
put("import_text", "text", b"\x00" + b"The cat sat on the mat.\n\nAnother line\r\n")
put("import_text", "fortunes", b"\x06" + b"Q: Why?\nA: Because.\n%\nSecond fortune\n%\n" + SEP + b"third\n")
jl = [{"prompt": "What is 2+2?", "response": "4", "system": "Be brief."},
      {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "}]}]
put("import_text", "jsonl", b"\x01" + "\n".join(json.dumps(r) for r in jl).encode() + b"\n")
put("import_text", "jsonl-files", b"\x0d" + json.dumps(jl[0]).encode() + SEP + json.dumps(jl[1]).encode())
# every record format, then a tokenizer_config.json of each template family (control bit 7)
fm = [{"instruction": "Add.", "input": "2 and 3", "output": "5"},
      {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},
      {"prompt": "The sky is", "completion": " blue."}, jl[1]]
recs = "\n".join(json.dumps(r) for r in fm).encode() + b"\n"
tpls = {"chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "gemma": "{{ bos_token }}{{ raise_exception('System role not supported') }}"
                 "<start_of_turn><end_of_turn>",
        "llama31": "<|start_header_id|><|eot_id|>Cutting Knowledge Date {%- set date_string = "
                   "\"26 Jul 2024\" %}",
        "unknown": "{% for message in messages %}<|user|>{% endfor %}"}
for name, t in tpls.items():
    cfg = {"bos_token": "<bos>" if name == "gemma" else None, "eos_token": "<eos>",
           "chat_template": t}
    put("import_text", "jsonl-" + name, b"\xc1" + recs + SEP + json.dumps(cfg).encode())

# ---- trainer_state.json (fuzz_trainer_state.c: model.safetensors of 23 bytes, xxh3 below)
state = {"format": "dtrain-checkpoint-1", "step": 1, "epoch": 0, "samples_seen": 64,
         "data_cursor": "epoch=0 batch=1 seed=7 rank=0 world=1 batch_size=64 seq_len=0 "
                        "fingerprint=0123456789abcdef",
         "rng": {"seed": 7, "counter": 1}, "schedule": {"step": 1, "lr": 0.001},
         "optimizer_step": 1, "world_size": 1, "zero_stage": 0,
         "layout": {"n": 10, "shards": 1, "shard": 10, "params": [["fc.weight", 0, 10]]},
         "metrics": {"loss": 1.25, "eval_accuracy": 0.5},
         "files": {"model.safetensors": {"bytes": 23, "xxh3": "98ce6ee96fe0d57f"}},
         "code_version": "unknown", "dtrain_version": "0.1.0"}
put("trainer_state", "valid.json", json.dumps(state, indent=1))
bad = dict(state, files={"model.safetensors": {"bytes": 24, "xxh3": "98ce6ee96fe0d57f"},
                         "optim-00000-of-00001.safetensors": {"bytes": 5, "xxh3": "0"}})
put("trainer_state", "missing-file.json", json.dumps(bad))

# ---- adapter_config.json
put("adapter_config", "peft.json", json.dumps({
    "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05,
    "target_modules": ["q_proj", "v_proj", "down_proj"], "bias": "none", "use_rslora": False,
    "use_dora": False, "rank_pattern": {}, "alpha_pattern": {}, "modules_to_save": None,
    "base_model_name_or_path": "meta-llama/Llama-3.1-8B", "fan_in_fan_out": False}, indent=2))

# ---- storage URLs (fuzz_store_uri.c): URL, key, region, endpoint
for i, s in enumerate([b"s3://bucket/runs/exp" + SEP + b"step-000000100/model.safetensors" + SEP + b"eu-west-1" + SEP + b"http://127.0.0.1:9000/",
                       b"file://ckpt/run" + SEP + b"step-000000001/trainer_state.json",
                       b"runs/checkpoints" + SEP + b"a/./b",
                       b"gs://bucket/x" + SEP + b"../etc/passwd",
                       b"s3://Bad_Bucket//p" + SEP + b"/abs"]):
    put("store_uri", "url-%d" % i, s)

# ---- S3 replies (fuzz_s3_xml.c): op byte, status byte, reply bodies
page1 = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>fuzz-bucket</Name>"
         "<Contents><Key>run/ck/step-000000100/model.safetensors</Key><Size>10</Size></Contents>"
         "<Contents><Key>run/ck/step-000000100/a&amp;b&#x41;&#66;.bin</Key></Contents>"
         "<IsTruncated>true</IsTruncated><NextContinuationToken>tok+/=1</NextContinuationToken>"
         "</ListBucketResult>")
page2 = ("<ListBucketResult><Contents><Key>run/ck/step-000000100/trainer_state.json</Key>"
         "</Contents><Contents><Key>run/ck/step-000000100/dir/</Key></Contents>"
         "<IsTruncated>false</IsTruncated></ListBucketResult>")
put("s3_xml", "list-2-pages", b"\x00\x00" + page1.encode() + SEP + page2.encode())
put("s3_xml", "multipart", b"\x01\x00" + b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
    b"<UploadId>up&lt;1&gt;/x+y</UploadId></InitiateMultipartUploadResult>" + SEP +
    b"<CompleteMultipartUploadResult><ETag>\"x-1\"</ETag></CompleteMultipartUploadResult>")
put("s3_xml", "multipart-error-in-200", b"\x01\x00" + b"<UploadId>u1</UploadId>" + SEP +
    b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>")
put("s3_xml", "get-404", b"\x02\x02" + b"<Error><Code>NoSuchKey</Code><Message>The key &quot;x&quot; does not exist</Message></Error>")
put("s3_xml", "get-503", b"\x02\x05" + b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>")

# ---- HTTP requests (fuzz_http.c): byte 0 bit 0 = the server with a token
reqs = [b"\x00GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET / HTTP/1.0\r\n\r\n",
        b"\x00GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET /api/runs/exp/run-a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET /api/runs/1/metrics?key=loss&since=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x01GET /api/runs/run-a HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer fuzz-token\r\n\r\n",
        b"\x01GET /metrics?access_token=fuzz-token HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\nabcd",
        b"\x00GET /../../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET /api/sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET /api/sweeps/exp/sw HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00GET /sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]
for i, r in enumerate(reqs):
    put("http", "req-%d" % i, r)
EOF

# ---- datasets written by the real importer: shard files and whole dataset directories
if [ ! -x "$dtrain" ]; then
  echo "make_seeds: $dtrain not found: shard and manifest seeds skipped (build first)" >&2
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'EOF'
import base64, json, os, struct, sys
t = sys.argv[1]
os.makedirs(t + "/idx")
def idx3(n, h, w):
    return struct.pack(">IIII", 0x803, n, h, w) + bytes((i * 37) & 255 for i in range(n * h * w))
def idx1(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)
for p, n in [("train", 5), ("t10k", 2)]:
    open("%s/idx/%s-images-idx3-ubyte" % (t, p), "wb").write(idx3(n, 4, 3))
    open("%s/idx/%s-labels-idx1-ubyte" % (t, p), "wb").write(idx1([(3 * i) % 10 for i in range(n)]))
open(t + "/text.txt", "w").write("one two three\n%\nfour five\n%\nsix\n")
open(t + "/chat.jsonl", "w").write(json.dumps({"prompt": "hi", "response": "hello there"}) + "\n" +
                                   json.dumps({"messages": [{"role": "user", "content": "a"},
                                                            {"role": "assistant", "content": "b c"}]}) + "\n")
ranks = "".join("%s %d\n" % (base64.b64encode(bytes([i])).decode(), i) for i in range(256))
ranks += "%s 256\n" % base64.b64encode(b"th").decode()
open(t + "/bytes.tiktoken", "w").write(ranks)
EOF
"$dtrain" data import mnist "$tmp/idx" -o "$tmp/img" --val 0.4 -q >/dev/null
"$dtrain" data import text "$tmp/text.txt" -o "$tmp/txt" --doc-sep % \
  --tokenizer "$tmp/bytes.tiktoken" -q >/dev/null
"$dtrain" data import jsonl "$tmp/chat.jsonl" -o "$tmp/chat" --tokenizer "$tmp/bytes.tiktoken" \
  -q >/dev/null
mkdir -p "$corpus/shard" "$corpus/manifest"
for ds in img/train img/val img/test txt/train chat/train; do
  name="${ds//\//-}"
  # fuzz_shard: control byte 0x07 (fix both checksums, verify), then the shard
  { printf '\x07'; cat "$tmp/$ds/shard-00000.dts"; } > "$corpus/shard/gen-$name"
  # fuzz_manifest: manifest.json, FUZZSPLIT, each shard in order
  {
    cat "$tmp/$ds/manifest.json"
    for s in "$tmp/$ds"/shard-*.dts; do printf 'FUZZSPLIT'; cat "$s"; done
  } > "$corpus/manifest/gen-$name"
done
# fuzz_image: small JPEG / PNG / WebP files written by Pillow (the venv's; skipped without it),
# each after a control byte (scale, short buffer; tests/fuzz/fuzz_image.c)
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
if "$py" -c 'import PIL, numpy' 2>/dev/null; then
  "$py" - "$corpus/image" <<'EOF'
import io, os, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
y, x = np.mgrid[0:12, 0:17]
rgb = Image.fromarray(np.stack([x * 15, y * 20, (x * y) % 256], -1).astype(np.uint8), "RGB")
def put(name, ctl, im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    open(os.path.join(out, "gen-" + name), "wb").write(bytes([ctl]) + b.getvalue())
ex = Image.Exif()
ex[0x0112] = 6
put("baseline.jpg", 0, rgb, "JPEG", quality=80)
put("progressive-half.jpg", 1, rgb, "JPEG", quality=80, progressive=True)
put("gray-eighth.jpg", 3, rgb.convert("L"), "JPEG")
put("exif6.jpg", 0, rgb, "JPEG", exif=ex.tobytes())
put("444-short.jpg", 4, rgb, "JPEG", subsampling=0)
put("rgba.png", 0, rgb.convert("RGBA"), "PNG")
put("palette.png", 0, rgb.quantize(8), "PNG", transparency=2)
put("gray16.png", 0, Image.fromarray((np.asarray(rgb.convert("L"), np.uint16) * 200)), "PNG")
put("lossless.webp", 0, rgb, "WEBP", lossless=True)
put("lossy-alpha.webp", 4, rgb.convert("RGBA"), "WEBP", quality=50)
EOF
fi
echo "make_seeds: wrote $(find "$corpus" -name 'gen-*' | wc -l) seeds," \
  "$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s}') bytes in all of $corpus"

"""tiktoken's single-threaded encode throughput (cl100k_base, offline) on the given text files,
for comparison with bench_data's tokenizer figure (same files, same kind of call: one
encode_ordinary of the whole text, best of 3).

usage: bench_data_tiktoken.py TOKENIZER_DIR FILE...
"""
import json
import os
import sys
import time

import tiktoken
from tiktoken.load import load_tiktoken_bpe

tokdir = sys.argv[1]
meta = json.load(open(os.path.join(tokdir, "cl100k_base.json")))
t0 = time.perf_counter()
enc = tiktoken.Encoding("cl100k_base", pat_str=meta["pat_str"],
                        mergeable_ranks=load_tiktoken_bpe(os.path.join(tokdir, "cl100k_base.tiktoken"),
                                                          expected_hash=meta["sha256"]),
                        special_tokens=meta["special_tokens"])
load = time.perf_counter() - t0
for path in sys.argv[2:]:
    raw = open(path, "rb").read()
    text = raw.decode("utf-8")
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        ids = enc.encode_ordinary(text)
        best = min(best, time.perf_counter() - t0)
    print(f"tokenizer tiktoken {path:<40} {len(raw) / best / 1e6:8.2f} MB/s  "
          f"({len(raw)} bytes -> {len(ids)} tokens, load {load * 1e3:.0f} ms)")

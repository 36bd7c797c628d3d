"""Reference token ids from OpenAI's tiktoken (PyPI) for cl100k_base, offline.

usage: ref_tok.py OUT_DIR [TOKENIZER_DIR]
Writes OUT_DIR/tok_cl100k.bin (see ref_tok_corpus.write_cases): every corpus line (>= 10,000,
ordinary text), multi-line blocks, and lines with <|endoftext|> both as ordinary text and with
special tokens allowed (flags 1). Also OUT_DIR/tok_corpus.txt (the lines) for benchmarks.
"""
import json
import os
import sys

import tiktoken
from tiktoken.load import load_tiktoken_bpe

import ref_tok_corpus as corpus

out = sys.argv[1]
tokdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "tokenizers")
meta = json.load(open(os.path.join(tokdir, "cl100k_base.json")))
enc = tiktoken.Encoding("cl100k_base", pat_str=meta["pat_str"],
                        mergeable_ranks=load_tiktoken_bpe(os.path.join(tokdir, "cl100k_base.tiktoken"),
                                                          expected_hash=meta["sha256"]),
                        special_tokens=meta["special_tokens"])

lines = corpus.make_lines()
assert len(lines) >= 10000
cases = [(0, ln, enc.encode_ordinary(ln)) for ln in lines]
cases += [(0, b, enc.encode_ordinary(b)) for b in corpus.make_blocks(lines)]
cases += [(0, c, enc.encode_ordinary(c)) for c in corpus.code_lines() + corpus.long_lines()]
for i, ln in enumerate(lines[:200]):
    t = ln[: len(ln) // 2] + "<|endoftext|>" + ln[len(ln) // 2:] + ("<|fim_prefix|>x<|endofprompt|>" if i % 3 == 0 else "")
    cases.append((0, t, enc.encode_ordinary(t)))
    cases.append((1, t, enc.encode(t, allowed_special="all")))
corpus.write_cases(os.path.join(out, "tok_cl100k.bin"), cases)
with open(os.path.join(out, "tok_corpus.txt"), "w", encoding="utf-8", newline="") as f:
    f.write("\n".join(lines) + "\n")
print(f"ref_tok: {len(cases)} cases, {sum(len(c[2]) for c in cases)} tokens")

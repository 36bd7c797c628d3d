"""Reference token ids from Hugging Face `tokenizers` (PyPI) for byte-level BPEs it trains here.

usage: ref_tok_hf.py OUT_DIR
Trains two byte-level BPE tokenizers (vocab 4000) on the first half of the test corpus and saves
them as tokenizer.json:
  hf_bytelevel.json  GPT-2 style: ByteLevel pre-tokenizer with its regex, merges applied in order;
  hf_split.json      Llama 3 style: Split(cl100k regex, Isolated) + ByteLevel(use_regex=False),
                     ignore_merges=True.
Then writes the ids `tokenizers` gives for every corpus line, multi-line blocks and lines with
added special tokens: tok_hf_bytelevel.bin, tok_hf_split.bin (ref_tok_corpus.write_cases).
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

import ref_tok_corpus as corpus

out = sys.argv[1]
lines = corpus.make_lines()
train = lines[: len(lines) // 2]
SPECIALS = ["<|endoftext|>", "<|pad|>"]
PAT = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                                  "tokenizers", "cl100k_base.json")))["pat_str"]


def build(kind):
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train, trainer)
    return tok


for kind in ("bytelevel", "split"):
    tok = build(kind)
    tok.save(os.path.join(out, f"hf_{kind}.json"))
    texts = lines + corpus.make_blocks(lines) + corpus.code_lines() + corpus.long_lines()
    cases = [(1, t, tok.encode(t).ids) for t in texts]
    for ln in lines[:100]:
        t = ln[: len(ln) // 2] + "<|endoftext|>" + ln[len(ln) // 2:] + "<|pad|>"
        cases.append((1, t, tok.encode(t).ids))
    corpus.write_cases(os.path.join(out, f"tok_hf_{kind}.bin"), cases)
    print(f"ref_tok_hf {kind}: {len(cases)} cases, vocab {tok.get_vocab_size()}")

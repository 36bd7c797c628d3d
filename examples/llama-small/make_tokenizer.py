"""Writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json: OpenAI's cl100k_base
(data/tokenizers/cl100k_base.tiktoken, with the pattern and special tokens of cl100k_base.json)
in Hugging Face's form, plus Llama 3's chat tokens at the ids `dtrain data import jsonl` gives them
(dt_tokenizer_add_llama3_chat: the next free ids after cl100k's largest, <|endofprompt|> = 100276,
so 100277-100281). The small Llama of the LoRA demo (scripts/lora_demo.sh) is trained on data
imported with the .tiktoken file itself; its exported folder carries these two files so that
`dtrain generate` and transformers' AutoTokenizer read the same ids (tests/train/lora_e2e.sh checks
HF `tokenizers` against the imported shards).

The conversion is transformers' TikTokenConverter's: vocab = the ranks (token bytes in GPT-2's
byte-to-unicode text), merges = for every token each split into two tokens, ordered by the
token's rank; `ignore_merges` makes a pre-tokenized piece that is a whole token come out whole,
as tiktoken does. Plain Python, about 2 s; the result is ~6 MB, so it is made, not committed.
    python3 make_tokenizer.py OUT_DIR [TIKTOKEN_FILE]"""
import base64
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
rank_file = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    here, "..", "..", "data", "tokenizers", "cl100k_base.tiktoken")
with open(os.path.splitext(rank_file)[0] + ".json", encoding="utf-8") as f:
    meta = json.load(f)  # {"pat_str": ..., "special_tokens": {text: id}, ...}

ranks = {}
with open(rank_file, "rb") as f:
    for line in f:
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
assert len(ranks) == meta["n_ranks"], (len(ranks), meta["n_ranks"])

# GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest map above 255
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(bs) - 189)  # 256, 257, ... in byte order
b2u = {b: chr(c) for b, c in zip(bs, cs)}
assert len(set(b2u.values())) == 256


def text(b):
    return "".join(b2u[x] for x in b)


vocab = {text(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])}
merges = []
for tok, rank in ranks.items():
    local = [(tok[:i], tok[i:]) for i in range(1, len(tok))
             if tok[:i] in ranks and tok[i:] in ranks]
    local.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
    merges += [(rank, p) for p in local]
merges.sort(key=lambda m: m[0])  # stable: within a token the order above stays

chat = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>"]
special = dict(meta["special_tokens"])
next_id = max(max(ranks.values()), max(special.values())) + 1
for name in chat:
    if name not in special:
        special[name] = next_id
        next_id += 1


# The special tokens are in model.vocab too: `tokenizers` gives an added token that the model
# lacks the next id after the largest it knows, which would close cl100k's gaps (100256,
# 100261-100275) and shift every special id; one the model has keeps the model's id.
vocab.update(special)


def added(name, i):
    return {"id": i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [added(n, i) for n, i in sorted(special.items(), key=lambda kv: kv[1])],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": meta["pat_str"]}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                       "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": True, "vocab": vocab,
              "merges": [[text(a), text(b)] for _, (a, b) in merges]},
}
# Llama 3's chat template (the layout `dtrain data import jsonl` writes, bos first)
template = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
config = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|eot_id|>",
    "model_max_length": 512,
    "clean_up_tokenization_spaces": False,
    "chat_template": template,
}
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, ensure_ascii=False, indent=1)
print(f"{out}/tokenizer.json: {len(ranks)} cl100k tokens, {len(merges)} merges, special "
      + ", ".join(f"{n} {i}" for n, i in sorted(special.items(), key=lambda kv: kv[1])))

"""Makes examples/llama-small/tokenizer.json: examples/llama-tiny's 512-token byte-level BPE plus
Llama 3's chat tokens as special tokens 512-516 (<|begin_of_text|>, <|end_of_text|>,
<|start_header_id|>, <|end_header_id|>, <|eot_id|>): the ids `dtrain data import jsonl` gives them
(dt_tokenizer_add_llama3_chat: the next free ids), so that `dtrain generate --prompt` can write a
chat prompt with them. Plain Python; run once by a developer (the result is committed)."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "llama-tiny", "tokenizer.json"), encoding="utf-8") as f:
    tok = json.load(f)
names = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
         "<|eot_id|>"]
base = len(tok["model"]["vocab"])
assert base == 512 and all(t["content"] not in names for t in tok["added_tokens"])
for i, n in enumerate(names):
    tok["added_tokens"].append({"id": base + i, "content": n, "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})
with open(os.path.join(here, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
print(f"{here}/tokenizer.json: {base} BPE tokens + {len(names)} chat tokens")

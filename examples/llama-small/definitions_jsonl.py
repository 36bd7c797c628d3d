"""Turns Debian's fortunes `definitions` file into instruction pairs for the LoRA demo
(scripts/lora_demo.sh): each fortune of the form
    Term:
    <TAB>what it means ...
becomes {"prompt": "Define: Term", "response": "what it means ..."} (wrapped lines joined, an
attribution "-- Author" on its own line). Fortunes of another shape are skipped.
    python3 definitions_jsonl.py [SRC] > definitions.jsonl"""
import json
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes/definitions"
with open(src, encoding="utf-8", errors="replace") as f:
    docs = f.read().split("\n%\n")
n = 0
for d in docs:
    lines = d.strip("\n").split("\n")
    head, body = lines[0].rstrip(), lines[1:]
    if not head.endswith(":") or head.startswith((" ", "\t")) or not body:
        continue
    if any(l.strip() and not l.startswith((" ", "\t")) for l in body):
        continue
    parts = []
    for l in (l.strip() for l in body if l.strip()):
        sep = "\n" if l.startswith("--") and parts else " "
        parts.append((sep if parts else "") + l)
    resp = "".join(parts)
    print(json.dumps({"prompt": "Define: " + head[:-1].strip(), "response": resp},
                     ensure_ascii=False))
    n += 1
print(f"{src}: {n} definitions", file=sys.stderr)

"""Reference ids from Hugging Face `tokenizers` for SentencePiece-style BPEs it trains here.

usage: ref_tok_sp.py OUT_DIR
Builds the four configurations of ref_sp_build.py (llama2, metaspace, metasplit, gemma; vocab
1500, byte fallback for characters left out of the alphabet), and "unk": metasplit without byte
fallback (such characters are the fused unknown token), on half of the test corpus and
saves each as OUT_DIR/sp_KIND.json. Then writes tok_sp_KIND.bin (ref_tok_corpus.write_cases):
the ids `tokenizers` gives for every corpus line, multi-line blocks, long lines and lines with
the special tokens <s> and </s> inside (flags 1: specials recognised; | 2: the library's
decode does not give the text back, e.g. the leading space a Metaspace decoder drops), and for
each of those a decode case (flags 4): the library's decode(ids) as the text; and continued
cases (flags 8): the ids of "<s>" + text without the first, which dtrain must give for the text
with DT_TOK_CONTINUED (the text follows a special token in the string).
"""
import os
import sys

import ref_sp_build
import ref_tok_corpus as corpus

out = sys.argv[1]
lines = corpus.make_lines(n=4000)
SPECIALS = ["<s>", "</s>"]
for kind in ("llama2", "metaspace", "metasplit", "gemma", "unk"):
    tok = ref_sp_build.build("metasplit" if kind == "unk" else kind, lines[: len(lines) // 2],
                             SPECIALS, byte_fallback=kind != "unk")
    tok.save(os.path.join(out, f"sp_{kind}.json"))
    texts = lines + corpus.make_blocks(lines) + corpus.code_lines() + corpus.long_lines()
    texts += [ln[: len(ln) // 2] + "<s>" + ln[len(ln) // 2:] + "</s>" for ln in lines[:200]]
    texts += ["<s>" + ln for ln in lines[200:300]]
    cases, back = [], []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        if kind == "unk" and dec != t:  # "<unk>" stands for what it lost: no decode case
            cases.append((1 | 2, t, ids))
            continue
        cases.append((1 | (2 if dec != t else 0), t, ids))
        if dec != t:
            back.append((4, dec, ids))
    cont = [(8, ln, tok.encode("<s>" + ln, add_special_tokens=False).ids[1:])
            for ln in lines[300:500]]
    corpus.write_cases(os.path.join(out, f"tok_sp_{kind}.bin"), cases + back + cont)
    print(f"ref_tok_sp {kind}: {len(cases)} cases ({len(back)} not given back by decode), "
          f"vocab {tok.get_vocab_size()}")

"""SentencePiece-style BPE tokenizers (Llama 2, Mistral v0.3, Gemma 2 configurations) built with
Hugging Face `tokenizers` from a corpus, for dtrain's parity tests; no downloads.

build(kind, lines, specials, vocab_size) trains a BPE on `lines` in the family's configuration,
then rebuilds it as those families publish it: ids 0.. for "<unk>" and `specials`, then the 256
byte tokens "<0x00>".."<0xFF>", then the learned tokens; model.byte_fallback true, unk_token
"<unk>", fuse_unk true (byte_fallback=False: a character not in the vocabulary is "<unk>", one
for a run of them). limit_alphabet keeps rare characters (CJK, emoji) out of the vocabulary,
so they fall back to their byte tokens. Kinds:
  llama2    normalizer Prepend("\u2581") + Replace(" ", "\u2581"), no pre-tokenizer; decoder
            Replace("\u2581", " "), ByteFallback, Fuse, Strip(" ", 1, 0) (Llama 2, TinyLlama,
            Mistral v0.1-v0.3 tokenizer.json);
  metaspace pre-tokenizer Metaspace(prepend_scheme "first", split false), decoder ByteFallback +
            Metaspace (the legacy=false conversion of the same models);
  metasplit Metaspace(prepend_scheme "always", split true) and its decoder;
  gemma     normalizer Replace(" ", "\u2581"), no pre-tokenizer; decoder Replace, ByteFallback,
            Fuse (Gemma, Gemma 2).
"""
import json

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    trainers

SPACE = "\u2581"


def _configure(tok, kind):
    rep_dec = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if kind == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE),
                                               normalizers.Replace(" ", SPACE)])
        tok.decoder = decoders.Sequence(rep_dec + [decoders.Strip(" ", 1, 0)])
    elif kind == "gemma":
        tok.normalizer = normalizers.Replace(" ", SPACE)
        tok.decoder = decoders.Sequence(rep_dec)
    else:
        scheme, split = ("first", False) if kind == "metaspace" else ("always", True)
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=scheme,
                                                     split=split)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement=SPACE,
                                                            prepend_scheme=scheme, split=split)])


def build(kind, lines, specials, vocab_size=1500, byte_fallback=True):
    tok = Tokenizer(models.BPE())
    _configure(tok, kind)
    if kind in ("llama2", "gemma"):  # train on words so that training stays quick
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never")
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, limit_alphabet=120))
    model = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=byte_fallback))
    _configure(out, kind)
    out.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return out

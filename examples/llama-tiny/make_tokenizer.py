"""Makes examples/llama-tiny/tokenizer.json: a byte-level BPE of 512 tokens trained with Hugging
Face `tokenizers` on Debian's fortunes corpus (/usr/share/games/fortunes). Run once by a
developer (the result is committed); needs the reference venv (scripts/setup-venv.sh)."""
import glob
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

files = [f for f in glob.glob("/usr/share/games/fortunes/*")
         if not f.endswith((".dat", ".u8")) and os.path.isfile(f)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
tok.train(sorted(files), trainer)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer.json")
tok.save(out)
print(f"{out}: {tok.get_vocab_size()} tokens from {len(files)} files", file=sys.stderr)

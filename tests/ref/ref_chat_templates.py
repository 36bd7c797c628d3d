"""Reference chat renderings from transformers' apply_chat_template for dtrain's JSONL import.

usage: ref_chat_templates.py OUT_DIR
Trains one byte-level BPE (`tokenizers`, Llama 3 style: Split(cl100k regex) + ByteLevel, vocab
1200) on the test corpus with every family's control tokens added, and writes a model folder per
template: OUT_DIR/chat-NAME/{tokenizer.json, tokenizer_config.json (the family's published
chat_template, bos/eos), records.jsonl, expected.txt}. records.jsonl mixes OpenAI messages,
ShareGPT and Alpaca records (with and without system prompts, multi-turn, padded contents);
each is turned into a conversation by the rule docs/data.md states (ShareGPT from -> role, Alpaca
user turn = instruction + "\\n\\n" + input when input is non-empty), rendered and tokenized by
AutoTokenizer.from_pretrained(folder).apply_chat_template(conv, tokenize=True). The loss mask is
computed here from the rendered text: a token is trained on when it overlaps an assistant turn's
content or the end-of-turn token right after it. expected.txt: per record "n id... mask...".
Folders chat-zephyr, chat-nemo, chat-llama32 carry templates dtrain must refuse.
The folders chat-mistral-sp, chat-mistral-ms and chat-gemma2-sp carry SentencePiece-style
tokenizers instead (ref_sp_build.py: byte fallback; Llama 2 / Mistral normalizers, Mistral's
Metaspace "first" pre-tokenizer, Gemma's normalizer), as those families publish them.
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

import ref_sp_build
import ref_tok_corpus as corpus

out = sys.argv[1]
PAT = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                                  "tokenizers", "cl100k_base.json")))["pat_str"]
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "[INST]",
            "[/INST]", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]

# The published templates (tokenizer_config.json "chat_template"), tools branches left out or cut
# short where they do not change a plain conversation.
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
          "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
          "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>"
          "assistant<|end_header_id|>\\n\\n' }}{% endif %}")
LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query." }}
    {{- "<|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""
GEMMA2 = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
          "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
          "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
          "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
          "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
          "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
          "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>"
          "model\\n'}}{% endif %}")
ZEPHYR = ("{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + "
          "message['content'] + eos_token }}{% endif %}{% endfor %}")
NEMO = MISTRAL.replace("loop.first and system_message", "loop.last and system_message")
LLAMA32 = LLAMA31.replace('{%- set date_string = "26 Jul 2024" %}',
                          '{%- set date_string = strftime_now("%d %b %Y") %}')

# name: (template, bos, eos, end-of-turn token, contents trimmed, system allowed)
FAMILIES = {
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", True, True),
    "llama31": (LLAMA31, "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", True, True),
    "qwen2": (QWEN2, None, "<|im_end|>", "<|im_end|>", False, True),
    "qwen25": (QWEN25, None, "<|im_end|>", "<|im_end|>", False, True),
    "mistral": (MISTRAL, "<s>", "</s>", "</s>", False, True),
    "gemma2": (GEMMA2, "<bos>", "<eos>", "<end_of_turn>", True, False),
}
REFUSED = {"zephyr": ZEPHYR, "nemo": NEMO, "llama32": LLAMA32}
# SentencePiece-style folders: name: (family, ref_sp_build kind)
SP_FOLDERS = {"mistral-sp": ("mistral", "llama2"), "mistral-ms": ("mistral", "metaspace"),
              "gemma2-sp": ("gemma2", "gemma")}

lines = corpus.make_lines(n=3000)
tok = Tokenizer(models.BPE(ignore_merges=True))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(lines, trainers.BpeTrainer(
    vocab_size=1200, special_tokens=SPECIALS, show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))

# (record, conversation it stands for)
def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]

CHATS = [
    msgs(("user", "What is 2+2?"), ("assistant", "4")),
    msgs(("system", "Be brief, friend."), ("user", "Hi there"), ("assistant", "Hello! How can I help?"),
         ("user", "Name a colour."), ("assistant", "\u00a0 Teal.\u3000\n")),
    msgs(("user", " padded question\n"), ("assistant", "Line one.\nLine two: café, naïve.\n"),
         ("user", "Thanks"), ("assistant", "You're welcome 👋")),
]
SHAREGPT = {"conversations": [{"from": "system", "value": "You answer in French."},
                              {"from": "human", "value": "Good morning"},
                              {"from": "gpt", "value": "Bonjour !"}]}
SHAREGPT_CONV = msgs(("system", "You answer in French."), ("user", "Good morning"),
                     ("assistant", "Bonjour !"))
ALPACA = [{"instruction": "Translate to German.", "input": "The dog sleeps.",
           "output": "Der Hund schläft."},
          {"instruction": "Give a prime number.", "input": "", "output": "Seven"}]
ALPACA_CONV = [msgs(("user", "Translate to German.\n\nThe dog sleeps."),
                    ("assistant", "Der Hund schläft.")),
               msgs(("user", "Give a prime number."), ("assistant", "Seven"))]


def mask_of(hf, conv, end_tok, trim):
    text = hf.apply_chat_template(conv, tokenize=False)
    enc = hf(text, add_special_tokens=False, return_offsets_mapping=True)
    spans, cur = [], 0
    for m in conv:
        c = m["content"].strip() if trim else m["content"]
        at = text.index(c, cur)
        cur = at + len(c)
        if m["role"] == "assistant":
            assert text.startswith(end_tok, cur), (text, cur)
            spans.append((at, cur + len(end_tok)))
    return enc["input_ids"], [int(any(a < e and b > s for s, e in spans)) for a, b in
                              enc["offset_mapping"]]


def folder(name, template, bos, eos, tk=tok):
    d = os.path.join(out, "chat-" + name)
    os.makedirs(d, exist_ok=True)
    tk.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
           "clean_up_tokenization_spaces": False, "chat_template": template}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    return d


SP_TOKS = {kind: ref_sp_build.build(kind, lines, SPECIALS, vocab_size=1200)
           for _, kind in SP_FOLDERS.values()}
RUNS = [(name, FAMILIES[name], tok) for name in FAMILIES]
RUNS += [(name, FAMILIES[fam], SP_TOKS[kind]) for name, (fam, kind) in SP_FOLDERS.items()]
for name, (template, bos, eos, end_tok, trim, system), tk in RUNS:
    d = folder(name, template, bos, eos, tk)
    hf = AutoTokenizer.from_pretrained(d)
    records = [({"messages": c}, c) for c in CHATS]
    records += [(SHAREGPT, SHAREGPT_CONV)] + list(zip(ALPACA, ALPACA_CONV))
    if not system:  # Gemma 2's template raises on a system turn: dtrain skips those records
        records = [(r, c) for r, c in records if c[0]["role"] != "system"]
    with open(os.path.join(d, "records.jsonl"), "w", encoding="utf-8") as fr, \
            open(os.path.join(d, "expected.txt"), "w") as fe:
        for rec, conv in records:
            ids = hf.apply_chat_template(conv, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ref, mask = mask_of(hf, conv, end_tok, trim)
            assert list(ids) == list(ref), (name, conv)
            fr.write(json.dumps(rec, ensure_ascii=False) + "\n")
            fe.write(" ".join(map(str, [len(ids)] + list(ids) + mask)) + "\n")
    print(f"ref_chat_templates {name}: {len(records)} records")
for name, template in REFUSED.items():
    folder(name, template, "<s>", "</s>")

# Data pipeline: shards, manifests, importers, tokenizer, loader (src/data, src/cli/data.c).
#
# Tokenizer references come from the PyPI libraries (tiktoken, tokenizers) in the project's
# virtual environment (dt_ref_venv, tests/CMakeLists.txt). Fashion-MNIST references need only
# numpy (Debian python3) and the IDX files of Debian's dataset-fashion-mnist.
set(DT_FMNIST_DIR "/usr/share/datasets/fashion-mnist" CACHE PATH
    "IDX files of Fashion-MNIST (Debian dataset-fashion-mnist)")
set(DT_TOKENIZERS "${PROJECT_SOURCE_DIR}/data/tokenizers")

dt_ref_venv(NAME ref_tok SCRIPT tests/ref/ref_tok.py)
dt_ref_venv(NAME ref_tok_hf SCRIPT tests/ref/ref_tok_hf.py)
set_tests_properties(ref_tok ref_tok_hf PROPERTIES LABELS "parity;data")
dt_test(NAME test_tok_cl100k SOURCES data/test_tok_parity.c LABELS parity data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken tok_cl100k.bin
        FIXTURES_REQUIRED ref_tok TIMEOUT 120)
dt_test(NAME test_tok_hf SOURCES data/test_tok_parity.c LABELS parity data
        ARGS ${DT_REF_DIR}/hf_bytelevel.json tok_hf_bytelevel.bin
             ${DT_REF_DIR}/hf_split.json tok_hf_split.bin
        FIXTURES_REQUIRED ref_tok_hf TIMEOUT 120)

dt_ref(NAME ref_data_fmnist SCRIPT tests/ref/ref_data_fmnist.py)
set_tests_properties(ref_data_fmnist PROPERTIES LABELS "parity;data")
dt_test(NAME test_data_fmnist SOURCES data/test_data_fmnist.c LABELS data parity
        ARGS ${DT_FMNIST_DIR} FIXTURES_REQUIRED ref_data_fmnist TIMEOUT 120)

dt_test(NAME test_data_shard SOURCES data/test_data_shard.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_data_import SOURCES data/test_data_import.c LABELS unit data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 60)
dt_test(NAME test_data_loader SOURCES data/test_data_loader.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_data_resume SOURCES data/test_data_resume.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_tok_unit SOURCES data/test_tok_unit.c LABELS unit data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 60)
# The CLI code is compiled in directly (src/cli/data.c), so the test does not depend on how
# src/cli/main.c dispatches.
dt_test(NAME test_data_cli SOURCES data/test_data_cli.c ${PROJECT_SOURCE_DIR}/src/cli/data.c
        LABELS unit data ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 60)
# JSONL chat import against transformers' apply_chat_template (model folders of five template
# families, generated with `tokenizers`) and the refusals of other templates.
dt_ref_venv(NAME ref_chat_templates SCRIPT tests/ref/ref_chat_templates.py TIMEOUT 120)
set_tests_properties(ref_chat_templates PROPERTIES LABELS "parity;data")
dt_test(NAME test_chat_parity SOURCES data/test_chat_parity.c LABELS parity data
        ARGS ${DT_REF_DIR} FIXTURES_REQUIRED ref_chat_templates TIMEOUT 60)

# Llama inference with a KV cache, sampling, and Hugging Face folders written by dtrain.
dt_ref_venv(NAME ref_generate SCRIPT tests/ref/ref_generate.py)
dt_test(NAME test_generate SOURCES nn/test_generate.c LABELS parity unit FIXTURES_REQUIRED ref_generate)
# test_generate writes gen_gqa_saved (sharded) and gen_tied_saved; transformers must load them.
set_tests_properties(test_generate PROPERTIES FIXTURES_SETUP generate_saved)
add_test(NAME llama_save_hf_load
         COMMAND ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/check_llama_save.py ${DT_REF_DIR})
set_tests_properties(llama_save_hf_load PROPERTIES LABELS parity FIXTURES_REQUIRED "ref_generate;generate_saved"
                     TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2;HF_HUB_OFFLINE=1;TRANSFORMERS_OFFLINE=1")

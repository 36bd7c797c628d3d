# LoRA on Llama against transformers + PEFT: parity of logits, loss and adapter gradients with
# PEFT's adapter loaded (test_lora), then PEFT loading the adapter dtrain saved
# (lora_save_peft_load), the trainable-parameter count and dt_lora_load's refusals.
dt_ref_venv(NAME ref_lora SCRIPT tests/ref/ref_lora.py)
dt_test(NAME test_lora SOURCES nn/test_lora.c LABELS parity unit FIXTURES_REQUIRED ref_lora)
# test_lora writes lora_*_dtrain_adapter and lora_*_dtrain_out.safetensors.
set_tests_properties(test_lora PROPERTIES FIXTURES_SETUP lora_saved)
add_test(NAME lora_save_peft_load
         COMMAND ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/check_lora_save.py ${DT_REF_DIR})
set_tests_properties(lora_save_peft_load PROPERTIES LABELS parity FIXTURES_REQUIRED "ref_lora;lora_saved"
                     TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2;HF_HUB_OFFLINE=1;TRANSFORMERS_OFFLINE=1")

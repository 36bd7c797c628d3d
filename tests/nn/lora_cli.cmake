# `dtrain lora merge` and `dtrain generate --adapter` (src/nn/lora_merge.c, src/cli/lora.c):
# on ref_lora.py's random bases and PEFT adapters, the merged folder loads in transformers with
# PEFT's logits and merge_and_unload() weights, and generating with --adapter equals generating
# from the merged folder (and PEFT's greedy decoding); with modules_to_save (lora_mts*), the
# merged folder holds the adapter's trained copies of embed_tokens / norms / lm_head.
add_test(NAME lora_merge_peft
         COMMAND ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/check_lora_merge.py ${DT_REF_DIR}
                 $<TARGET_FILE:dtrain> ${CMAKE_BINARY_DIR}/lora-merge-test)
set_tests_properties(lora_merge_peft PROPERTIES LABELS parity FIXTURES_REQUIRED ref_lora
                     TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2;HF_HUB_OFFLINE=1;TRANSFORMERS_OFFLINE=1")
# Refusals: exit status, one line on stderr naming the problem, no output folder written.
foreach(case no-output bad-subcommand missing-base missing-adapter)
  add_test(NAME lora_cli_error_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/nn/lora_cli_errors.sh
           $<TARGET_FILE:dtrain> ${DT_REF_DIR} ${CMAKE_BINARY_DIR}/lora-cli-errors ${case})
  set_tests_properties(lora_cli_error_${case} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()
foreach(case not-an-adapter other-base extra-tensors rslora claimed-base output-is-base generate-other-base
        untie some-layers config-module)
  add_test(NAME lora_cli_error_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/nn/lora_cli_errors.sh
           $<TARGET_FILE:dtrain> ${DT_REF_DIR} ${CMAKE_BINARY_DIR}/lora-cli-errors ${case})
  set_tests_properties(lora_cli_error_${case} PROPERTIES LABELS "unit;parity" TIMEOUT 60
                       FIXTURES_REQUIRED ref_lora)
endforeach()

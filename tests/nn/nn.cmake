dt_ref_venv(NAME ref_resnet SCRIPT tests/ref/ref_resnet.py)
dt_test(NAME test_resnet SOURCES nn/test_resnet.c LABELS parity FIXTURES_REQUIRED ref_resnet TIMEOUT 600)
set_tests_properties(test_resnet PROPERTIES FIXTURES_SETUP resnet_out)
add_test(NAME resnet_torchvision_load
         COMMAND ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/check_resnet_roundtrip.py ${DT_REF_DIR})
set_tests_properties(resnet_torchvision_load PROPERTIES LABELS parity FIXTURES_REQUIRED resnet_out)
dt_ref_venv(NAME ref_llama SCRIPT tests/ref/ref_llama.py)
dt_test(NAME test_llama SOURCES nn/test_llama.c LABELS parity FIXTURES_REQUIRED ref_llama)
dt_test(NAME test_model_files SOURCES nn/test_model_files.c LABELS unit)
dt_test(NAME test_base_map SOURCES nn/test_base_map.c LABELS unit)
# The command line: generate from token ids with a saved model (greedy), and refuse bad input.
add_test(NAME cli_generate_ids COMMAND dtrain generate --model ${DT_REF_DIR}/gen_gqa --ids 1,5,9,12 --max-new 8)
set_tests_properties(cli_generate_ids PROPERTIES LABELS parity FIXTURES_REQUIRED ref_generate
                     PASS_REGULAR_EXPRESSION "^[0-9]+(,[0-9]+)+")
add_test(NAME cli_generate_bad_ids COMMAND dtrain generate --model ${DT_REF_DIR}/gen_gqa --ids 1,x)
set_tests_properties(cli_generate_bad_ids PROPERTIES LABELS unit WILL_FAIL TRUE)
dt_test(NAME test_steady SOURCES nn/test_steady.c LABELS unit)
# Every refusal of a config.json names the file, the key and the rule broken.
dt_test(NAME test_llama_config_errors SOURCES nn/test_llama_config_errors.c LABELS unit)
# config.json's sizes against the weights' headers before allocating (train pretrained, generate),
# and the KV cache against the machine: each refused in one line naming the field and the file.
add_test(NAME nn_config_shapes COMMAND ${PROJECT_SOURCE_DIR}/tests/nn/config_shapes.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(nn_config_shapes PROPERTIES LABELS "unit;e2e" TIMEOUT 300 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")

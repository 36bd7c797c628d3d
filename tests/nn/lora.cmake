# LoRA on Llama against transformers + PEFT: parity of logits, loss and the gradients of
# adapters and modules_to_save with PEFT's adapter loaded (test_lora), then PEFT loading the
# adapter dtrain saved (lora_save_peft_load), the trainable-parameter count (dt_lora_param_count,
# the graph, dtrain plan) and dt_lora_load's refusals.
dt_ref_venv(NAME ref_lora SCRIPT tests/ref/ref_lora.py)
dt_test(NAME test_lora SOURCES nn/test_lora.c LABELS parity unit FIXTURES_REQUIRED ref_lora)
# test_lora writes lora_*_dtrain_adapter and lora_*_dtrain_out.safetensors.
set_tests_properties(test_lora PROPERTIES FIXTURES_SETUP lora_saved)
add_test(NAME lora_save_peft_load
         COMMAND ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/check_lora_save.py ${DT_REF_DIR})
set_tests_properties(lora_save_peft_load PROPERTIES LABELS parity FIXTURES_REQUIRED "ref_lora;lora_saved"
                     TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2;HF_HUB_OFFLINE=1;TRANSFORMERS_OFFLINE=1")
# modules_to_save under the trainer and MPI: the flat buffer holds adapters + modules (the tied
# embedding in f32), ZeRO-2 == DDP, a resumed checkpoint continues bit for bit, the exported
# adapter holds the trained modules under PEFT's names.
if(MPI_FOUND)
  add_executable(lora_mts_dist nn/lora_mts_dist.c)
  target_link_libraries(lora_mts_dist PRIVATE dt_testutil)
  add_test(NAME lora_mts_dist_np2 COMMAND sh -c
           "rm -rf runs-lora-mts && ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np 2 $<TARGET_FILE:lora_mts_dist> ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR}")
  set_tests_properties(lora_mts_dist_np2 PROPERTIES LABELS "dist;e2e" TIMEOUT 300
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR} FIXTURES_REQUIRED fortunes_data
                       RUN_SERIAL TRUE
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
endif()

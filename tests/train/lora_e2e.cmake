# The LoRA demo (scripts/lora_demo.sh, `make lora-demo`) shortened: pretrain examples/llama-small
# (cl100k_base tokens) on fortunes, LoRA-finetune it on 2 MPI workers on the unseen `definitions`
# instruction pairs; the val loss must fall by >= 0.3 nats, checkpoints and adapter must be there,
# generation from the merged folder must equal generation with --adapter, and the exported
# tokenizer must give dtrain's ids in HF tokenizers and transformers, and the merged folder dtrain's
# logits in transformers (the venv's Python).
# About 2 minutes on 2 idle cores (200 CPU-seconds; 3.5-4.5 min measured on this shared machine).
add_test(NAME lora_e2e_definitions
         COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_e2e.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/lora-e2e ${DT_VENV_PYTHON})
# Back in CI: its intermittent NaN was scale/sum backward reading their beta-0 gradient buffer
# (0 * NaN left in reused memory); DT_GRAPH_POISON now makes every test catch that class.
# Label slow (make test-slow): 5 minutes of CI's 30 on an AVX2-only VM; the LoRA paths it
# joins are tested in CI by test_lora, lora_save_peft_load, lora_mts_dist_np2, train_lora_memory.
set_tests_properties(lora_e2e_definitions PROPERTIES LABELS "e2e;slow" TIMEOUT 900 RUN_SERIAL TRUE
                     ENVIRONMENT "GOMP_SPINCOUNT=1000")

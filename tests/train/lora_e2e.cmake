# The LoRA demo (scripts/lora_demo.sh, `make lora-demo`) shortened: pretrain examples/llama-small
# on fortunes, LoRA-finetune it on 2 MPI workers on the unseen `definitions` instruction pairs;
# the val loss must fall by >= 0.3 nats, checkpoints and adapter must be there, and generation
# from the merged folder must equal generation with --adapter. About a minute on 2 idle cores.
add_test(NAME lora_e2e_definitions
         COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_e2e.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/lora-e2e)
# Label slow (make test-slow), not CI: the 2-worker LoRA finetuning intermittently hits a NaN
# loss after its first step (~1 run in 10-20 on a loaded machine, never seen in one process;
# not tied to LoRA dropout or to overlap) -- a known bug under investigation (README,
# "Limitations"); `ctest -R lora_e2e -L slow` runs it.
set_tests_properties(lora_e2e_definitions PROPERTIES LABELS "slow;e2e" TIMEOUT 900 RUN_SERIAL TRUE
                     ENVIRONMENT "GOMP_SPINCOUNT=1000")

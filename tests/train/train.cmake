# The trainer end to end on real data. The datasets are imported once by fixtures with the
# dtrain CLI: Fashion-MNIST (Debian dataset-fashion-mnist) and fortunes (Debian fortunes) with
# the tiny Llama's tokenizer.
set(DT_TRAIN_DATA ${CMAKE_BINARY_DIR}/train-data)
add_test(NAME import_fmnist COMMAND sh -c
  "rm -rf ${DT_TRAIN_DATA}/fmnist && $<TARGET_FILE:dtrain> data import fashion-mnist ${DT_FMNIST_DIR} -o ${DT_TRAIN_DATA}/fmnist -q")
set_tests_properties(import_fmnist PROPERTIES FIXTURES_SETUP fmnist_data LABELS "e2e;data")
add_test(NAME import_fortunes COMMAND sh -c
  "rm -rf ${DT_TRAIN_DATA}/fortunes && $<TARGET_FILE:dtrain> data import text /usr/share/games/fortunes -o ${DT_TRAIN_DATA}/fortunes --doc-sep % --val 0.05 --tokenizer ${PROJECT_SOURCE_DIR}/examples/llama-tiny/tokenizer.json -q")
set_tests_properties(import_fortunes PROPERTIES FIXTURES_SETUP fortunes_data LABELS "e2e;data")

foreach(case fmnist repeat fortunes)
  dt_test(NAME train_${case} SOURCES train/test_train.c LABELS e2e TIMEOUT 600
          ARGS ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} ${case})
  # RUN_SERIAL: two trainings with 2 threads each on 2 cores only slow each other down.
  set_tests_properties(train_${case} PROPERTIES WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                       FIXTURES_REQUIRED "fmnist_data;fortunes_data" RUN_SERIAL TRUE)
endforeach()
set_tests_properties(train_fortunes PROPERTIES FIXTURES_SETUP fortunes_model)
# The exported Hugging Face folder gives the same logits in transformers as in dtrain.
add_test(NAME train_fortunes_export_hf COMMAND ${DT_VENV_PYTHON}
         ${PROJECT_SOURCE_DIR}/tests/ref/check_trained_llama.py
         ${CMAKE_BINARY_DIR}/runs-test/llama-tiny-fortunes/fortunes/model $<TARGET_FILE:dtrain>
         ${PROJECT_SOURCE_DIR}/examples/llama-tiny/tokenizer.json)
set_tests_properties(train_fortunes_export_hf PROPERTIES LABELS "e2e;parity"
                     FIXTURES_REQUIRED fortunes_model)
# Config errors: exit code 2, one line naming the key/file, no training step. One test a case.
foreach(case typo unknown-override wrong-type out-of-range bad-enum bad-depth malformed-yaml
        missing-config missing-data channels classes model-data-kind lora-resnet shard-base-no-lora
        shard-base-auto-shares short-warmup
        bf16-no-cpu device-spec device-cuda device-cuda-index crop-scale crop-ratio jitter mean-std
        std-zero resize label-smoothing)
  add_test(NAME train_cli_error_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/train/cli_errors.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(train_cli_error_${case} PROPERTIES LABELS "unit;e2e"
                       FIXTURES_REQUIRED fmnist_data)
endforeach()
# The C-API example: a custom MLP trained by the trainer (> 80% on Fashion-MNIST).
add_test(NAME train_custom_model COMMAND custom_model ${DT_TRAIN_DATA}/fmnist 400)
set_tests_properties(train_custom_model PROPERTIES LABELS e2e FIXTURES_REQUIRED fmnist_data
                     WORKING_DIRECTORY ${CMAKE_BINARY_DIR} RUN_SERIAL TRUE
                     ENVIRONMENT "GOMP_SPINCOUNT=1000")
# The full ResNet-18 example to >= 92%: hours on 2 cores, so only `make test-slow` runs it.
dt_test(NAME train_fmnist_full SOURCES train/test_train.c LABELS "slow;e2e" TIMEOUT 36000
        ARGS ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} fmnist_full)
set_tests_properties(train_fmnist_full PROPERTIES WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                     FIXTURES_REQUIRED fmnist_data RUN_SERIAL TRUE)
# dtrain's trainer under mpirun: N ranks x batch b == 1 process x batch N*b (tiny Llama,
# ResNet with SyncBatchNorm); repeats, overlap off and ZeRO 1-3 against plain DDP.
if(MPI_FOUND)
  add_executable(train_dist train/test_train_dist.c)
  target_link_libraries(train_dist PRIVATE dt_testutil)
  # uneven dist.batch_shares ([3,1], [2,1,1]) against 1 process x the global batch, and a resume
  foreach(np 2 3)
    add_test(NAME train_shares_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
             --oversubscribe --bind-to none -np ${np} $<TARGET_FILE:train_dist>
             ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} shares)
    set_tests_properties(train_shares_np${np} PROPERTIES LABELS "dist;e2e" TIMEOUT 300
                         WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                         FIXTURES_REQUIRED fortunes_data
                         RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  endforeach()
  # dist.gpu_comm=host on CPU ranks (the exchange of a job with GPU ranks) == 1 process
  add_test(NAME train_staged_np2 COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
           --oversubscribe --bind-to none -np 2 $<TARGET_FILE:train_dist>
           ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} staged)
  set_tests_properties(train_staged_np2 PROPERTIES LABELS "dist;e2e" TIMEOUT 300
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                       FIXTURES_REQUIRED fortunes_data
                       RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  # dist.batch_shares=auto: rank 1 made 3x slower (test hook), re-balanced after step 6; == 1
  # process x the global batch; a resume after the re-balance keeps the parts, bit for bit
  add_test(NAME train_shares_auto COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
           --oversubscribe --bind-to none -np 2 $<TARGET_FILE:train_dist>
           ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} auto)
  set_tests_properties(train_shares_auto PROPERTIES LABELS "dist;e2e" TIMEOUT 300
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                       FIXTURES_REQUIRED fortunes_data RUN_SERIAL TRUE
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000;DT_TEST_SLOW_RANK=1:3")
  foreach(np 2 3 4)
    add_test(NAME train_dist_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
             --oversubscribe --bind-to none -np ${np} $<TARGET_FILE:train_dist>
             ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR})
    set_tests_properties(train_dist_np${np} PROPERTIES LABELS "dist;e2e" TIMEOUT 300
                         WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                         FIXTURES_REQUIRED "fortunes_data;fmnist_data"
                         RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  endforeach()
endif()
# ZeRO stages 1-3 divide optimizer state, gradients and parameters per rank as `dtrain plan` says.
if(MPI_FOUND)
  add_test(NAME train_zero_memory COMMAND ${PROJECT_SOURCE_DIR}/tests/train/zero_memory.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${MPIEXEC_EXECUTABLE}
           --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(train_zero_memory PROPERTIES LABELS "dist;e2e" TIMEOUT 300 RUN_SERIAL TRUE
                       FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
endif()
# LoRA vs full finetuning of the 56M Llama: measured peak memory against `dtrain plan` (15%).
add_test(NAME train_lora_memory COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_memory.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(train_lora_memory PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data)
# The terminal progress line (train.progress) under a pseudo-terminal (util-linux script): redrawn
# segments, ETA, checkpoint field, every other line at column 0; plain output into a file; off;
# a narrow terminal; 2 ranks under mpirun; a bad value.
add_test(NAME train_progress COMMAND ${PROJECT_SOURCE_DIR}/tests/train/progress.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(train_progress PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")

# `make demo` itself (scripts/demo.sh): >= 88% test accuracy, the killed worker recovered, the
# run in the store with both attempts, checkpoints, model, plot, and a working resume command.
add_test(NAME demo COMMAND ${PROJECT_SOURCE_DIR}/tests/train/demo_test.sh ${CMAKE_BINARY_DIR}
                           ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/demo-test)
set_tests_properties(demo PROPERTIES LABELS e2e TIMEOUT 600 RUN_SERIAL TRUE
                     ENVIRONMENT "GOMP_SPINCOUNT=1000")
# Memory admission (train.memory_check): plans above MemAvailable (1 and 2 ranks) or a real
# memory cgroup's limit are refused in one line before allocating; off/warn go past the check;
# `dtrain plan` warns when a worker does not fit the machine.
add_test(NAME train_memory_admission COMMAND ${PROJECT_SOURCE_DIR}/tests/train/memory_admission.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${MPIEXEC_EXECUTABLE}
         --allow-run-as-root --oversubscribe --bind-to none)
set_tests_properties(train_memory_admission PROPERTIES LABELS "e2e;dist" TIMEOUT 300 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")

# A flipped payload byte: train stops naming the shard and byte range, or skips and counts it.
add_test(NAME data_corrupt_train COMMAND ${PROJECT_SOURCE_DIR}/tests/data/corrupt_train.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(data_corrupt_train PROPERTIES LABELS "e2e;data" TIMEOUT 300 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")

# A resume with a longer run: schedule.on_extend continue | stretch | restart, each against the
# rates of the run it must equal (src/train/ckpt.c).
add_test(NAME train_schedule_on_extend
         COMMAND ${PROJECT_SOURCE_DIR}/tests/train/on_extend.sh $<TARGET_FILE:dtrain>
                 ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(train_schedule_on_extend PROPERTIES LABELS "train;ckpt;e2e" TIMEOUT 180
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
# The frozen LoRA base once per host (lora.share_base): host PSS of 1-3 workers grows per worker
# by less than half the bf16 base, the copying path's by more; mapped == copied == converted
# (f32 file -> bf16 base, once per host in shared memory) bit for bit; 2 workers == 1 with the
# global batch to bf16 resolution.
if(MPI_FOUND)
  add_test(NAME train_lora_host_base COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_host_base.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${DT_VENV_PYTHON}
           ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(train_lora_host_base PROPERTIES LABELS "dist;e2e;parity" TIMEOUT 300
                       RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000;HF_HUB_OFFLINE=1")
endif()
# The converted base's shared segment and its fallback (no segment: each worker copies): the
# adapters of the copied base, the reason on the start line, nothing left after the job or a
# SIGKILL.
if(MPI_FOUND)
  add_test(NAME train_lora_host_base_segment
           COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_host_base_segment.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${DT_VENV_PYTHON} ${MPIEXEC_EXECUTABLE}
                   --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(train_lora_host_base_segment PROPERTIES LABELS "dist;e2e;parity" TIMEOUT 300
                       RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000;HF_HUB_OFFLINE=1")
endif()
# The frozen LoRA base sharded across workers (lora.shard_base): 2 ranks (no ZeRO) and 4 ranks
# (ZeRO-3, recompute) give the adapters of the whole base bit for bit, rank 0's resident memory
# falls by the base less its 1/N, `dtrain plan` models it, and a resume continues bit for bit.
if(MPI_FOUND)
  foreach(cfg "np2;0;false" "np4_zero3;3;true")
    list(GET cfg 0 tag)
    list(GET cfg 1 zero)
    list(GET cfg 2 rc)
    string(REGEX REPLACE "^np([0-9]+).*" "\\1" np ${tag})
    add_test(NAME train_lora_shard_base_${tag}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora_shard_base.sh $<TARGET_FILE:dtrain>
                     ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${DT_VENV_PYTHON} ${np} ${zero} ${rc}
                     ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
    set_tests_properties(train_lora_shard_base_${tag} PROPERTIES LABELS "dist;e2e;parity"
                         TIMEOUT 120 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                         ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000;HF_HUB_OFFLINE=1")
  endforeach()
endif()
# train.precision: bf16 (tiny Llama, narrow ResNet-18): close to fp32 but not equal, and a resume
# bit for bit; through the exact emulation (DT_CPU_BF16=emulate) on any CPU, and natively (linear
# and conv2d on oneDNN bf16 primitives) where the CPU has bf16 instructions.
dt_test(NAME train_bf16 SOURCES train/test_train_bf16.c LABELS e2e TIMEOUT 300
        ARGS ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} ENV DT_CPU_BF16=emulate)
set_tests_properties(train_bf16 PROPERTIES WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                     FIXTURES_REQUIRED "fmnist_data;fortunes_data" RUN_SERIAL TRUE)
dt_test(NAME train_bf16_native SOURCES train/test_train_bf16.c LABELS e2e TIMEOUT 300
        ARGS ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR} ENV DT_TEST_BF16=native)
set_tests_properties(train_bf16_native PROPERTIES WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                     FIXTURES_REQUIRED "fmnist_data;fortunes_data" RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77)
# `dtrain train --json` (and `lora merge --json`): one JSON object on stdout agreeing with run.json,
# the checkpoint and the export; refusals as objects with exit_code 2.
add_test(NAME train_json_out COMMAND ${PROJECT_SOURCE_DIR}/tests/train/json_out.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(train_json_out PROPERTIES LABELS "train;e2e" TIMEOUT 120
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
# The step as a CUDA graph: decision, scalar block, CPU refusals (src/train/device_capture.c).
dt_test(NAME device_capture SOURCES train/device_capture.c LABELS unit)

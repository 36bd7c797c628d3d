# Checkpoint safety and the `dtrain ckpt` command (src/cli/ckpt.c), end to end with a tiny Llama
# on the fortunes fixture:
#   ckpt_cli_local / ckpt_cli_s3   ls | verify | show on local disk (path, file://, run dir,
#                                  usage errors) and on a real SeaweedFS S3 (tests/storage/
#                                  seaweed.sh; SKIP 77 when its weed binary is missing)
#   ckpt_corrupt_<kind>            the newest checkpoint damaged one way: `dtrain ckpt verify`
#                                  names the file, resume=auto warns, skips it and resumes from
#                                  the previous one, good checkpoints untouched
#   ckpt_retention_<case>          22 saves, keep_last 3 + keep_best 2: exactly the expected set,
#                                  also when one save fails (its directory is a file)
#   ckpt_sigkill                   2 ranks SIGKILLed while a ~330 MB checkpoint is written:
#                                  resume=auto takes the previous one
set(DT_SAFETY_ENV "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")

add_test(NAME ckpt_cli_local COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/cli.sh $<TARGET_FILE:dtrain>
                                     ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} local)
set_tests_properties(ckpt_cli_local PROPERTIES LABELS "ckpt;e2e" TIMEOUT 120
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "${DT_SAFETY_ENV}")
if(TARGET s3_get)
  add_test(NAME ckpt_cli_s3
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/storage/seaweed.sh run --
                   ${PROJECT_SOURCE_DIR}/tests/ckpt/cli.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} s3 $<TARGET_FILE:s3_get>)
  set_tests_properties(ckpt_cli_s3 PROPERTIES LABELS "ckpt;storage;e2e" TIMEOUT 120
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "${DT_SAFETY_ENV}")
endif()

foreach(kind flipped-byte truncated-optim missing-file missing-state bad-json)
  add_test(NAME ckpt_corrupt_${kind}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/corrupt.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${kind})
  set_tests_properties(ckpt_corrupt_${kind} PROPERTIES LABELS "ckpt;e2e" TIMEOUT 120
                       FIXTURES_REQUIRED fortunes_data ENVIRONMENT "${DT_SAFETY_ENV}")
endforeach()

foreach(case plain failed-save)
  add_test(NAME ckpt_retention_${case}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/retention.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(ckpt_retention_${case} PROPERTIES LABELS "ckpt;e2e" TIMEOUT 120
                       FIXTURES_REQUIRED fortunes_data ENVIRONMENT "${DT_SAFETY_ENV}")
endforeach()

# RUN_SERIAL: the kill must land between a snapshot and its commit, whatever else the cores do.
if(MPI_FOUND)
  add_test(NAME ckpt_sigkill
           COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/sigkill.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${MPIEXEC_EXECUTABLE}
                   --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(ckpt_sigkill PROPERTIES LABELS "ckpt;dist;e2e" TIMEOUT 180
                       RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "${DT_SAFETY_ENV}")
endif()

# An unusable checkpoint location (src/ckpt/save.c's probe; src/train/loop.c exports anyway):
# refused before training, or with ckpt.require_writable=false trained, reported and exported.
foreach(case file readonly train enospc)
  add_test(NAME ckpt_unwritable_${case}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/unwritable.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(ckpt_unwritable_${case} PROPERTIES LABELS "ckpt;e2e" TIMEOUT 120
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "${DT_SAFETY_ENV}")
endforeach()
if(MPI_FOUND)
  add_test(NAME ckpt_unwritable_mpi
           COMMAND ${PROJECT_SOURCE_DIR}/tests/ckpt/unwritable.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} mpi ${MPIEXEC_EXECUTABLE}
                   --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(ckpt_unwritable_mpi PROPERTIES LABELS "ckpt;dist;e2e" TIMEOUT 150
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "${DT_SAFETY_ENV}")
endif()

# Checkpoints on S3 and resharding (tests/ckpt/s3_*.sh, test_reshard.c).
#
# The S3 tests train against a real SeaweedFS cluster (master, volume server, filer and S3
# gateway as separate processes) that tests/storage/seaweed.sh starts on 127.0.0.1 for each test
# and stops afterwards; they SKIP (77) only when its weed binary is missing. s3_get is their
# store client (create the bucket, get/stat/list objects, verify checkpoints).
add_executable(s3_get ckpt/s3_get.c)
target_link_libraries(s3_get PRIVATE dt_testutil)
set(DT_CKPT_SEAWEED bash ${PROJECT_SOURCE_DIR}/tests/storage/seaweed.sh run --)
set(DT_CKPT_ENV "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")

# A wrong AWS_SECRET_ACCESS_KEY: one "access denied" line at start (resume=auto lists the
# store), or a failed run whose checkpoints were never committed (resume=never); the secret is
# in no output.
add_test(NAME ckpt_s3_auth
         COMMAND ${DT_CKPT_SEAWEED} ${PROJECT_SOURCE_DIR}/tests/ckpt/s3_auth.sh
                 $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} $<TARGET_FILE:s3_get>)
set_tests_properties(ckpt_s3_auth PROPERTIES LABELS "ckpt;storage;e2e" TIMEOUT 120
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "${DT_CKPT_ENV}")

# Multipart checkpoint uploads (a 22M-parameter Llama: 89 + 178 MB) with the S3 gateway killed
# mid-upload and restarted 1.5 s later (committed after retries, or reported and skipped), and
# 8 s later (outlasts every retry: the failure path for sure). RUN_SERIAL: the kill must land
# while the upload runs, whatever else the 2 cores are doing.
foreach(case "retry;1.5" "outage;8")
  list(GET case 0 name)
  list(GET case 1 down)
  add_test(NAME ckpt_s3_multipart_${name}
           COMMAND ${DT_CKPT_SEAWEED} ${PROJECT_SOURCE_DIR}/tests/ckpt/s3_multipart.sh
                   $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA}
                   $<TARGET_FILE:s3_get> ${down})
  set_tests_properties(ckpt_s3_multipart_${name} PROPERTIES LABELS "ckpt;storage;e2e"
                       TIMEOUT 180 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       FIXTURES_REQUIRED fortunes_data ENVIRONMENT "${DT_CKPT_ENV}")
endforeach()

if(NOT MPI_FOUND)
  return()
endif()
set(DT_CKPT_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)

# Exact resume from S3: 2 ranks, ZeRO-2, SIGTERM + ckpt.resume=auto == uninterrupted, byte for
# byte (final checkpoint's objects and the exported model).
add_test(NAME ckpt_s3_resume
         COMMAND ${DT_CKPT_SEAWEED} ${PROJECT_SOURCE_DIR}/tests/ckpt/s3_resume.sh
                 $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA}
                 $<TARGET_FILE:s3_get> ${DT_CKPT_MPIRUN})
set_tests_properties(ckpt_s3_resume PROPERTIES LABELS "ckpt;storage;e2e;dist" TIMEOUT 180
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "${DT_CKPT_ENV}")

# Resharding 2 -> 3 ranks on local disk: a 2-rank ZeRO-2 run checkpoints at step 8 (fixture),
# then test_reshard resumes it on 3 ranks through the C API and checks parameters and each
# rank's optimizer slice bit for bit before training on.
add_executable(test_reshard ckpt/test_reshard.c)
target_link_libraries(test_reshard PRIVATE dt_testutil)
set(DT_RESHARD_DIR ${CMAKE_BINARY_DIR}/ckpt-reshard)
set(DT_RESHARD_ARGS ${PROJECT_SOURCE_DIR}/examples/llama-tiny-fortunes.yaml
    data.train=${DT_TRAIN_DATA}/fortunes/train data.val= data.seq_len=64 data.batch=4
    train.steps=12 train.threads=1 train.log_every=4 schedule.warmup_steps=2 optim.clip_norm=1
    dist.zero_stage=2 dist.bucket_mb=0.25 ckpt.keep_last=0 output.dir=${DT_RESHARD_DIR})
list(JOIN DT_RESHARD_ARGS " " DT_RESHARD_ARGS_STR)
list(JOIN DT_CKPT_MPIRUN " " DT_CKPT_MPIRUN_STR)
add_test(NAME ckpt_reshard_save
         COMMAND sh -c "rm -rf ${DT_RESHARD_DIR} && ${DT_CKPT_MPIRUN_STR} -np 2 $<TARGET_FILE:dtrain> train ${DT_RESHARD_ARGS_STR} ckpt.every_steps=8 output.run_name=np2")
set_tests_properties(ckpt_reshard_save PROPERTIES LABELS "ckpt;storage;e2e;dist" TIMEOUT 120
                     RUN_SERIAL TRUE FIXTURES_SETUP ckpt_reshard FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "${DT_CKPT_ENV}")
add_test(NAME ckpt_reshard_np3
         COMMAND ${DT_CKPT_MPIRUN} -np 3 $<TARGET_FILE:test_reshard>
                 ${DT_RESHARD_DIR}/llama-tiny-fortunes/np2/checkpoints/step-000000008
                 ${DT_RESHARD_ARGS})
set_tests_properties(ckpt_reshard_np3 PROPERTIES LABELS "ckpt;storage;e2e;dist" TIMEOUT 120
                     RUN_SERIAL TRUE FIXTURES_REQUIRED "ckpt_reshard;fortunes_data"
                     ENVIRONMENT "${DT_CKPT_ENV}")

# Issue 12, input surfaces: the monitoring endpoint, secrets and file permissions
# (docs/security.md, "Endpoint safety" and "Secrets and files").
#
# test_endpoint: the real server in this process over sockets: where it may listen, token files,
# methods (nothing changes state), oversized requests, path traversal, DNS rebinding.
dt_test(NAME test_endpoint SOURCES security/test_endpoint.c LABELS "unit;security" TIMEOUT 120)
# secrets_creds: the S3 credentials file (profiles, precedence, mode 600 required, malformed and
# hostile files), checked by the key id a request is signed with (a one-shot server).
dt_test(NAME secrets_creds SOURCES security/secrets_creds.c LABELS "unit;security" TIMEOUT 120)

set(DT_SURFACE_MPIRUN "")
if(MPI_FOUND)
  set(DT_SURFACE_MPIRUN ${MPIEXEC_EXECUTABLE})
endif()
# The same rules through `dtrain serve` and `dtrain launch` (curl): refusals are one line, token
# files must be mode 600, the token is never on the command line or printed.
add_test(NAME surface_cli COMMAND bash ${PROJECT_SOURCE_DIR}/tests/security/surface_cli.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_SURFACE_MPIRUN})
# Every folder 0750 and file 0640 (umask 000) after real import, train (checkpoints, store,
# export), launch and MLflow export runs; 0700/0600 under umask 077.
add_test(NAME test_perms COMMAND bash ${PROJECT_SOURCE_DIR}/tests/security/test_perms.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_SURFACE_MPIRUN})
set_tests_properties(surface_cli test_perms PROPERTIES LABELS "e2e;security" TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# S3 credentials from ~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE (profiles, mode 600
# required), and no secret in any output, run directory or the store; a real SeaweedFS
# (tests/storage/seaweed.sh; SKIP without its weed binary).
add_test(NAME secrets_s3
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/storage/seaweed.sh run --
                 bash ${PROJECT_SOURCE_DIR}/tests/security/secrets_s3.sh $<TARGET_FILE:dtrain>
                 ${PROJECT_SOURCE_DIR} $<TARGET_FILE:s3_get>)
set_tests_properties(secrets_s3 PROPERTIES LABELS "storage;e2e;security" TIMEOUT 300
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")
# Issue 26: a FIFO or a directory where a file is read (model weights and config.json, the YAML
# config, a dataset's manifest and shard, an importer's input, a tokenizer, a checkpoint's
# files) is refused at once with one line naming it (it used to wait for a writer for ever).
add_test(NAME security_nonregular COMMAND bash ${PROJECT_SOURCE_DIR}/tests/security/test_nonregular.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR})
set_tests_properties(security_nonregular PROPERTIES LABELS "e2e;security" TIMEOUT 600
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# Issue 26: a running dtrain (and its threads) is named "dtrain" in ps/top/the OOM killer's log
# (/proc/PID/comm), not "exe" after its re-exec, nor the name of a link it was started through.
add_test(NAME security_procname COMMAND bash ${PROJECT_SOURCE_DIR}/tests/security/test_procname.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR})
set_tests_properties(security_procname PROPERTIES LABELS "e2e;security" TIMEOUT 300)
# A full disk (ENOSPC) during a data import, a model export and the experiment store's writes,
# on a small tmpfs filled up to chosen free spaces: one line naming the file and the file system
# ("No space left on device (tmpfs at MOUNT: N of M free)"), nothing half-written under a final
# name, earlier datasets and store rows unchanged, training goes on past a full store
# (docs/security.md, "Disk full"). Needs root to mount the tmpfs: SKIP otherwise.
add_test(NAME security_enospc COMMAND bash ${PROJECT_SOURCE_DIR}/tests/security/enospc.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR})
set_tests_properties(security_enospc PROPERTIES LABELS "e2e;security" TIMEOUT 600
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")

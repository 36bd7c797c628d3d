# Checkpoint storage (src/store/storage*.c, s3_http.c). test_storage runs the same contract
# checks on any backend: POSIX on a temporary directory (unit), and S3 against a real SeaweedFS
# cluster (master, volume server, filer, S3 gateway) that tests/storage/seaweed.sh starts on
# 127.0.0.1 for each test and stops afterwards (storage;e2e; SKIP when the weed binary from
# scripts/setup-venv.sh is missing).
add_executable(test_storage storage/test_storage.c)
target_link_libraries(test_storage PRIVATE dt_testutil)
add_test(NAME storage_posix COMMAND test_storage --posix-tmp)
set_tests_properties(storage_posix PROPERTIES LABELS "unit;storage" TIMEOUT 120)
# The S3 backend against a scripted HTTP server in the test itself (retries, signing inputs,
# listings, multipart, Abort, stalls, environment checks).
add_executable(test_s3_mock storage/test_s3_mock.c)
target_link_libraries(test_s3_mock PRIVATE dt_testutil)
add_test(NAME storage_s3_mock COMMAND test_s3_mock)
set_tests_properties(storage_s3_mock PROPERTIES LABELS "unit;storage" TIMEOUT 120)

set(DT_SEAWEED_SH ${CMAKE_CURRENT_SOURCE_DIR}/storage/seaweed.sh)
foreach(case contract auth)
  add_test(NAME storage_s3_${case}
           COMMAND bash ${DT_SEAWEED_SH} run -- $<TARGET_FILE:test_storage> --s3-${case})
  set_tests_properties(storage_s3_${case} PROPERTIES LABELS "storage;e2e" TIMEOUT 120
                       SKIP_RETURN_CODE 77)
endforeach()
# The gateway or the volume server stopped (SIGKILL) mid multipart upload and restarted.
# RUN_SERIAL: the timing of the stop must not depend on what else the 2 cores are doing.
foreach(server s3 volume)
  add_test(NAME storage_s3_fault_${server}
           COMMAND bash ${DT_SEAWEED_SH} run -- $<TARGET_FILE:test_storage> --s3-fault ${server})
  set_tests_properties(storage_s3_fault_${server} PROPERTIES LABELS "storage;e2e" TIMEOUT 120
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endforeach()

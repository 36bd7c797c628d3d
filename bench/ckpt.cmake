# Checkpoint I/O benchmark (raw disk vs dt_store, resume read path): bench/bench_ckpt.sh.
add_executable(bench_ckpt_io ${CMAKE_CURRENT_SOURCE_DIR}/bench_ckpt_io.c)
target_link_libraries(bench_ckpt_io PRIVATE dtrain_static)
target_include_directories(bench_ckpt_io PRIVATE ${CJSON_INCLUDE} ${XXHASH_INCLUDE})

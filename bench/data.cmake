# Data pipeline benchmark (loader vs raw read, tokenizer vs tiktoken): bench/bench_data.sh.
add_executable(bench_data ${CMAKE_CURRENT_SOURCE_DIR}/bench_data.c)
target_include_directories(bench_data PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_data PRIVATE dtrain_static)
# Ranged-read throughput of a dataset's files, local directory vs S3: bench/bench_store_read.sh.
add_executable(bench_store_read ${CMAKE_CURRENT_SOURCE_DIR}/bench_store_read.c)
target_link_libraries(bench_store_read PRIVATE dtrain_static)

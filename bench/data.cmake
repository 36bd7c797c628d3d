# Data pipeline benchmark (loader vs raw read, tokenizer vs tiktoken): bench/bench_data.sh.
add_executable(bench_data ${CMAKE_CURRENT_SOURCE_DIR}/bench_data.c)
target_include_directories(bench_data PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_data PRIVATE dtrain_static)

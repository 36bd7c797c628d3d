add_executable(bench_models ${CMAKE_CURRENT_SOURCE_DIR}/bench_models.c)
target_link_libraries(bench_models PRIVATE dtrain_static)

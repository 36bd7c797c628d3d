# GEMM benchmark: raw cblas_sgemm (and oneDNN bf16) against dt_linear / dt_matmul in a graph.
# Run with bench/bench_gemm.sh; not a test.
add_executable(bench_gemm ${CMAKE_CURRENT_SOURCE_DIR}/bench_gemm.c)
target_include_directories(bench_gemm PRIVATE ${CBLAS_INCLUDE} ${DNNL_INCLUDE})
target_link_libraries(bench_gemm PRIVATE dtrain_static)

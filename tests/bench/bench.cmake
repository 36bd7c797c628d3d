# Benchmark scripts (bench/): the line each prints first (date, commit, CPU) for bench/RESULTS.md.
add_test(NAME bench_header COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench/header.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(bench_header PROPERTIES LABELS "unit" TIMEOUT 60 SKIP_RETURN_CODE 77)

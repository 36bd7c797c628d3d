# Benchmark scripts (bench/): the line each prints first (date, commit, CPU) for bench/RESULTS.md.
add_test(NAME bench_header COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench/header.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(bench_header PROPERTIES LABELS "unit" TIMEOUT 60 SKIP_RETURN_CODE 77)
# scripts/evaluate.py --image 224 (`make evaluate EVAL_IMAGE=224`) at a tiny size: ResNet-18 on
# generated photos at 224x224 in the formations; about 2 minutes, 2 workers.
add_test(NAME evaluate_224_tiny COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench/evaluate_224.sh
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(evaluate_224_tiny PROPERTIES LABELS "e2e;slow" TIMEOUT 600 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77)

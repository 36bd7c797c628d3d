# The monitoring server (src/serve, include/dtrain/serve.h) end to end with real 2-worker
# `dtrain launch` jobs of the tiny Llama: Debian's Prometheus scraping /metrics (values equal to
# the store's) and the Grafana dashboard's series, headless Chromium loading the dashboard
# during a live run (a growing loss chart, a screenshot in build/serve-out), and bad input (busy
# port, tokens, malformed HTTP). Skipped (77) without prometheus or chromium.
if(MPI_FOUND)
  foreach(case prometheus chromium bad-input)
    add_test(NAME serve_${case} COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/serve/serve_e2e.py
             $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case}
             ${CMAKE_BINARY_DIR}/serve-out)
    set_tests_properties(serve_${case} PROPERTIES LABELS "e2e" TIMEOUT 400 RUN_SERIAL TRUE
                         SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                         ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()
endif()
# /metrics' per-worker gauges (dtrain_batch_part, dtrain_compute_rate) from a store's metrics
dt_test(NAME serve_prom_ranks SOURCES serve/test_prom_ranks.c LABELS unit)

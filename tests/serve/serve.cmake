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
# The dashboard's sweep view: a real 6-trial ASHA sweep of the tiny Llama served by `dtrain
# serve`; /api/sweeps checked against sweep.json and the store, and headless Chromium's DOM of
# /sweeps (parallel-coordinates lines and axes, the best trial, the curves; a screenshot in
# build/serve-out). Skipped (77) without chromium.
add_test(NAME serve_sweep COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/serve/sweep_dash.py
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${CMAKE_BINARY_DIR}/serve-out)
set_tests_properties(serve_sweep PROPERTIES LABELS "e2e;sweep" TIMEOUT 180 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# /api/sweeps/ID on a hand-written store: resumed, failed, stopped, diverged and running
# trials, the best among them, a sweep of the same id in another experiment
dt_test(NAME test_sweep_api SOURCES serve/test_sweep_api.c LABELS "unit;sweep" TIMEOUT 60)

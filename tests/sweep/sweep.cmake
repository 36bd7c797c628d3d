# Sweeps (src/sweep/, dtrain sweep): samplers, spec rejections, ASHA and the median rule on
# hand-derived tables; ASHA replayed against Ray Tune's ASHAScheduler and the Sobol points
# against scipy (Ray in a venv of its own, scripts/setup-venv.sh; else skipped, 77); an end-to-end sweep on the tiny
# Llama with ASHA, a SIGKILL of the sweep and --resume; SIGTERM (exit 75) and --resume; bad
# sweep files refused by the CLI.
dt_test(NAME test_sweep SOURCES sweep/test_sweep.c LABELS "unit;sweep" TIMEOUT 60
        ARGS ${PROJECT_SOURCE_DIR})
add_test(NAME sweep_asha_ray COMMAND ${DT_RAY_PYTHON} ${PROJECT_SOURCE_DIR}/tests/sweep/asha_ray.py
         $<TARGET_FILE:test_sweep>)
set_tests_properties(sweep_asha_ray PROPERTIES LABELS "sweep;parity" TIMEOUT 120
                     SKIP_RETURN_CODE 77)
add_test(NAME sweep_sobol_scipy COMMAND ${DT_VENV_PYTHON}
         ${PROJECT_SOURCE_DIR}/tests/sweep/sobol_scipy.py $<TARGET_FILE:test_sweep>)
set_tests_properties(sweep_sobol_scipy PROPERTIES LABELS "sweep;parity" TIMEOUT 60
                     SKIP_RETURN_CODE 77)
add_test(NAME sweep_e2e COMMAND ${PROJECT_SOURCE_DIR}/tests/sweep/sweep_e2e.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(sweep_e2e PROPERTIES LABELS "sweep;e2e" TIMEOUT 180 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
add_test(NAME sweep_sigterm COMMAND ${PROJECT_SOURCE_DIR}/tests/sweep/sweep_e2e.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} sigterm)
set_tests_properties(sweep_sigterm PROPERTIES LABELS "sweep;e2e" TIMEOUT 120 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
# Trials across hosts (--hosts): two network-namespace hosts, each trial a dtrain launch job on
# one of them, the same losses bit for bit as on this machine's slots; refusals of options that
# cannot be met. Needs root for the namespaces (else skipped, 77).
if(MPI_FOUND)
  add_test(NAME sweep_hosts COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sweep/sweep_hosts.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:dtrain> ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR})
  set_tests_properties(sweep_hosts PROPERTIES LABELS "sweep;dist" TIMEOUT 300
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data)
endif()

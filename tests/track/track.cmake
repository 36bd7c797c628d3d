# The experiment store (src/track, include/dtrain/track.h): the API against real SQLite files,
# including two processes writing one file at once (unit: also under ASan), and `dtrain runs`
# on the store that real `dtrain train` runs of the tiny Llama write (e2e).
dt_test(NAME test_track SOURCES track/test_track.c LABELS unit TIMEOUT 120)
# The model registry's API (src/track/registry.c): schema migration, versions, immutability,
# aliases, references, the integrity check, a reader process during registrations.
dt_test(NAME test_registry SOURCES track/test_registry.c LABELS unit TIMEOUT 60)
# The MLflow client without a server (src/track/mlflow*.c): addresses, the spool a dead server
# leaves (every value once, bit for bit, batches within MLflow's limits), sync's errors, pending
# uploads and registry requests (register, alias) spooled with what a replay needs.
dt_test(NAME test_mlflow SOURCES track/test_mlflow.c LABELS unit TIMEOUT 60)
foreach(case compare attempts degraded)
  add_test(NAME track_runs_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/track/runs_cli.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(track_runs_${case} PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                       FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
# `dtrain runs plot` (src/cli/runs_plot.c) on two real runs: SVG structure and values, PNG pixels
# (the venv's Pillow; skipped without it), a resumed run's merge, errors. The PNG is kept in
# build/tests/track_runs_plot/.
add_test(NAME track_runs_plot COMMAND ${PROJECT_SOURCE_DIR}/tests/track/runs_plot.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA}
         ${CMAKE_CURRENT_BINARY_DIR}/track_runs_plot)
set_tests_properties(track_runs_plot PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1;DT_VENV_PYTHON=${DT_VENV_PYTHON}")
# `dtrain runs export --format mlflow` (src/cli/runs_mlflow.c): a 3-attempt run and a second run
# exported, read back with MLflow's client (the venv's mlflow; skipped without it) and
# compared with the json/csv export; renamed keys, re-export in place, errors.
add_test(NAME track_runs_mlflow COMMAND ${PROJECT_SOURCE_DIR}/tests/track/mlflow_export.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
set_tests_properties(track_runs_mlflow PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1;DT_VENV_PYTHON=${DT_VENV_PYTHON}")
# The store under faults, with real 2-worker `dtrain launch` jobs of the tiny Llama
# (tests/track/track_faults.py): a SIGKILLed worker (the launcher's record of the failed attempt,
# the resumed one, metrics told apart by attempt), two launches at once on one store, an
# unusable tracking.uri, and a live job's monitor under bad requests and a busy port.
if(MPI_FOUND)
  foreach(case kill concurrent bad-store monitor)
    add_test(NAME track_faults_${case}
             COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/track/track_faults.py
                     $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
    set_tests_properties(track_faults_${case} PROPERTIES LABELS "e2e;launch" TIMEOUT 240
                         RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                         ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()
endif()
# `dtrain models` (src/cli/models*.c, src/train/export_ckpt.c) on real runs of the tiny Llama:
# register/ls/show/diff/alias/verify with --json, immutability, readers during registration, a
# changed checkpoint refused (cli); exports byte-identical to the trainer's own and to `dtrain
# lora merge`, loaded by transformers and PEFT (export; exit 77 without the venv).
foreach(case cli export)
  add_test(NAME track_models_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/track/models_cli.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(track_models_${case} PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;DT_VENV_PYTHON=${DT_VENV_PYTHON}")
endforeach()
# tracking.uri http://... (src/track/mlflow*.c, `dtrain runs sync`): real `dtrain train` runs log
# to a real `mlflow server` (the venv's mlflow; every test exits 77 without it), started once
# by the fixture (its start-up, 20-40 s, is the slow part) and read back with MLflow's client:
# a run as its SQLite record (and with token or basic auth), a server failing mid-run (spooled,
# replayed by `runs sync`, no duplicates), nothing listening and malformed uris (one warning,
# training goes on); artefacts byte-identical with their manifest, attempts as tag and metric,
# uploads refused then sent by `runs sync`, `models register`/`alias` as MLflow model versions
# and aliases (also through an outage), `models sync` of versions made before MLflow was used
# (tests/track/mlflow_artifacts.py).
set(DT_MLFLOW_STATE ${CMAKE_CURRENT_BINARY_DIR}/track_mlflow_server)
add_test(NAME track_mlflow_server_start
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/track/mlflow_server.py start ${DT_MLFLOW_STATE})
add_test(NAME track_mlflow_server_stop
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/track/mlflow_server.py stop ${DT_MLFLOW_STATE})
set_tests_properties(track_mlflow_server_start PROPERTIES FIXTURES_SETUP mlflow_server
                     LABELS e2e TIMEOUT 180 SKIP_RETURN_CODE 77
                     ENVIRONMENT "DT_VENV_PYTHON=${DT_VENV_PYTHON}")
set_tests_properties(track_mlflow_server_stop PROPERTIES FIXTURES_CLEANUP mlflow_server
                     LABELS e2e TIMEOUT 30 SKIP_RETURN_CODE 77
                     ENVIRONMENT "DT_VENV_PYTHON=${DT_VENV_PYTHON}")
set(DT_MLFLOW_CASES logged outage down artifacts upload-outage registry models-sync)
if(MPI_FOUND) # `dtrain launch`'s attempt records on the MLflow run
  list(APPEND DT_MLFLOW_CASES launch)
endif()
foreach(case ${DT_MLFLOW_CASES})
  add_test(NAME track_mlflow_${case}
           COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/track/mlflow_server.py
                   $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${DT_MLFLOW_STATE}
                   ${case})
  set_tests_properties(track_mlflow_${case} PROPERTIES LABELS e2e TIMEOUT 120 RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED "fortunes_data;mlflow_server"
                       ENVIRONMENT "OMP_NUM_THREADS=1;DT_VENV_PYTHON=${DT_VENV_PYTHON}")
endforeach()

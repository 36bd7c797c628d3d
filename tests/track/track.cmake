# The experiment store (src/track, include/dtrain/track.h): the API against real SQLite files,
# including two processes writing one file at once (unit: also under ASan), and `dtrain runs`
# on the store that real `dtrain train` runs of the tiny Llama write (e2e).
dt_test(NAME test_track SOURCES track/test_track.c LABELS unit TIMEOUT 120)
foreach(case compare attempts degraded)
  add_test(NAME track_runs_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/track/runs_cli.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
  set_tests_properties(track_runs_${case} PROPERTIES LABELS e2e TIMEOUT 300 RUN_SERIAL TRUE
                       FIXTURES_REQUIRED fortunes_data ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

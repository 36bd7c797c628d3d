# dtrain launch: supervision, recovery from killed workers and from a hang (a stopped worker,
# found by the watchdog; both bit-identical to an uninterrupted run), --max-failures, no retries of data errors, preemption by SIGTERM (exit 75, exact
# continuation), bad input refused before anything starts, a long run with 5 injected failures,
# heterogeneous hosts (2 + 1 slots on two network namespaces), and `dtrain train` under srun.
if(MPI_FOUND)
  foreach(case recover hang no-retry bad-data preempt bad-input long)
    add_test(NAME launch_${case} COMMAND ${PROJECT_SOURCE_DIR}/tests/launch/launch.sh
             $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${case})
    set_tests_properties(launch_${case} PROPERTIES LABELS "launch;dist;e2e" TIMEOUT 300
                         RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                         ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()
  set_tests_properties(launch_bad-input PROPERTIES LABELS "launch;unit;e2e")
  add_test(NAME launch_netns_hetero COMMAND sh ${PROJECT_SOURCE_DIR}/tests/launch/launch_netns.sh
           ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:dtrain> ${DT_TRAIN_DATA} ${PROJECT_SOURCE_DIR})
  set_tests_properties(launch_netns_hetero PROPERTIES LABELS "launch;dist" TIMEOUT 300
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data)
  # `dtrain train` under Slurm: srun -n 2 --mpi=pmix on a one-node Slurm started by the test,
  # the same weights as mpirun -np 2 (skip code 77 without root or the Slurm packages)
  add_test(NAME launch_srun COMMAND bash ${PROJECT_SOURCE_DIR}/tests/launch/srun.sh
           $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA})
  set_tests_properties(launch_srun PROPERTIES LABELS "launch;dist;e2e" TIMEOUT 300
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data)
endif()
# The launcher as a library, without the CLI: host lists, resource checks, mpirun's output,
# the retry policy, and the supervision loop over a stand-in mpirun (the real one: launch.sh).
dt_test(NAME launch_unit SOURCES launch/test_launch.c LABELS "unit;launch" ARGS ${PROJECT_SOURCE_DIR})

# Synchronised batch normalisation (dt_graph_set_sync_batchnorm with dt_comm_allreduce_f64):
# N ranks vs the single-process full batch, sync off must differ, finite differences, and the
# error paths of a failing reducer (label dist; 1 thread per rank). The single-process run is
# also a unit test, so the ASan pass (make test-asan: -L unit) covers the error paths.
add_executable(test_syncbn dist/test_syncbn.c)
target_link_libraries(test_syncbn PRIVATE dt_testutil)
add_test(NAME test_syncbn_single COMMAND test_syncbn 1)
set_tests_properties(test_syncbn_single PROPERTIES LABELS "dist;unit" TIMEOUT 60
                     ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
if(MPI_C_FOUND)
  foreach(np 2 3)
    add_test(NAME test_syncbn_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none
                     -np ${np} $<TARGET_FILE:test_syncbn> ${np})
    set_tests_properties(test_syncbn_np${np} PROPERTIES LABELS dist TIMEOUT 120 PROCESSORS ${np}
                         ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  endforeach()
endif()

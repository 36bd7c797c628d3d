# Distributed tests (src/dist): the communicator and data-parallel training, with real ranks
# started by mpirun (label dist). Every rank runs 1 thread (OMP_NUM_THREADS=1, dt_threads_set(1)).
set(DT_DIST_ENV "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
dt_test(NAME test_dist_init SOURCES dist/test_dist_init.c LABELS dist TIMEOUT 60 ENV "${DT_DIST_ENV}")

foreach(t test_dist_comm test_dist_ddp)
  add_executable(${t} dist/${t}.c)
  target_link_libraries(${t} PRIVATE dt_testutil)
  # Run directly: the single-process communicator.
  add_test(NAME ${t}_single COMMAND ${t} 1)
  set_tests_properties(${t}_single PROPERTIES LABELS dist TIMEOUT 60 ENVIRONMENT "${DT_DIST_ENV}")
endforeach()

# ZeRO and the range collectives (test_dist_zero.c): small enough to be a unit test too, so the
# ASan pass (make test-asan: ctest -L unit) runs the single-process and the mpirun variants.
add_executable(test_dist_zero dist/test_dist_zero.c)
target_link_libraries(test_dist_zero PRIVATE dt_testutil)
add_test(NAME test_dist_zero_single COMMAND test_dist_zero 1)
set_tests_properties(test_dist_zero_single PROPERTIES LABELS "dist;unit" TIMEOUT 60
                     ENVIRONMENT "${DT_DIST_ENV}")

# The device ranks' gradient all-reduce (dt_gpu_comm) without a GPU: the choice logic and the
# host-staging path on the CPU device, single process here and on 2 ranks below.
add_executable(gpu_comm dist/test_gpu_comm.c)
target_link_libraries(gpu_comm PRIVATE dt_testutil)
add_test(NAME gpu_comm COMMAND gpu_comm 1)
set_tests_properties(gpu_comm PROPERTIES LABELS "dist;unit" TIMEOUT 60 ENVIRONMENT "${DT_DIST_ENV}")

if(NOT MPI_C_FOUND)
  message(STATUS "dist: MPI not found, only the single-process communicator is tested")
  return()
endif()

set(DT_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)

# (a) collectives on 1..4 ranks; (b)-(e) training equivalence, overlap, repeat, accumulation.
foreach(np 1 2 3 4)
  foreach(t test_dist_comm test_dist_ddp)
    add_test(NAME ${t}_np${np} COMMAND ${DT_MPIRUN} -np ${np} $<TARGET_FILE:${t}> ${np})
    set_tests_properties(${t}_np${np} PROPERTIES LABELS dist TIMEOUT 120 PROCESSORS ${np}
                         ENVIRONMENT "${DT_DIST_ENV}")
  endforeach()
endforeach()

# (d) run to run: two separate 3-rank jobs print the same parameter hashes.
add_test(NAME test_dist_ddp_repeat
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist/run_twice.sh
                 ${DT_MPIRUN} -np 3 $<TARGET_FILE:test_dist_ddp> 3)
set_tests_properties(test_dist_ddp_repeat PROPERTIES LABELS dist TIMEOUT 180 PROCESSORS 3
                     ENVIRONMENT "${DT_DIST_ENV}")

# (f) a rank killed at step 3: mpirun must fail (not hang) within 60 s and say why.
add_test(NAME test_dist_rank_dies
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect_fail.sh 60 "signal 9"
                 ${DT_MPIRUN} -np 3 $<TARGET_FILE:test_dist_ddp> 3 --die-at 3)
set_tests_properties(test_dist_rank_dies PROPERTIES LABELS dist TIMEOUT 90 PROCESSORS 3
                     ENVIRONMENT "${DT_DIST_ENV}")

# Shared-memory all-reduce over several "hosts" on one machine (DT_COMM_NODE_SIZE=k: every k
# consecutive ranks count as one host): 2 hosts of 2 ranks take the hierarchical path (sum on
# the host, MPI across hosts); 1 rank per host falls back to MPI_Allreduce and says why.
foreach(t test_dist_comm test_dist_ddp)
  add_test(NAME ${t}_2hosts COMMAND ${DT_MPIRUN} -np 4 $<TARGET_FILE:${t}> 4)
  set_tests_properties(${t}_2hosts PROPERTIES LABELS dist TIMEOUT 120 PROCESSORS 4
                       ENVIRONMENT "${DT_DIST_ENV};DT_COMM_NODE_SIZE=2")
endforeach()
add_test(NAME test_dist_comm_1perhost COMMAND ${DT_MPIRUN} -np 2 $<TARGET_FILE:test_dist_comm> 2)
set_tests_properties(test_dist_comm_1perhost PROPERTIES LABELS dist TIMEOUT 120 PROCESSORS 2
                     ENVIRONMENT "${DT_DIST_ENV};DT_COMM_NODE_SIZE=1")

# The MPI_THREAD_SERIALIZED path (calls serialised by a lock) on 2 ranks.
add_test(NAME test_dist_ddp_serialized COMMAND ${DT_MPIRUN} -np 2 $<TARGET_FILE:test_dist_ddp> 2)
set_tests_properties(test_dist_ddp_serialized PROPERTIES LABELS dist TIMEOUT 120 PROCESSORS 2
                     ENVIRONMENT "${DT_DIST_ENV};DT_MPI_THREAD=serialized")

# ZeRO stages 0-3 and range collectives on 1..4 ranks. (Under `make test-asan` LeakSanitizer
# checks the ranks too: Open MPI's own allocations are suppressed by tests/sanitize/lsan.supp.)
foreach(np 1 2 3 4)
  add_test(NAME test_dist_zero_np${np}
           COMMAND ${DT_MPIRUN} -np ${np} $<TARGET_FILE:test_dist_zero> ${np})
  set_tests_properties(test_dist_zero_np${np} PROPERTIES LABELS "dist;unit" TIMEOUT 120
                       PROCESSORS ${np} ENVIRONMENT "${DT_DIST_ENV}")
endforeach()

# The hang watchdog (dt_comm_set_timeout): with a 2 s timeout, rank 1 stops itself (SIGSTOP)
# before one collective of each kind; rank 0's watchdog must end the job within 15 s with exit
# status 76 and a line naming rank 0, the collective, dist.timeout_s and the stopped rank 1 with
# its pid (the collective board: it has not reached the collective), leaving no rank behind
# (the stopped one included). test_dist_hang normal: a timeout changes no result and a peer late
# by less than it raises no alarm.
add_executable(test_dist_hang dist/test_dist_hang.c)
target_link_libraries(test_dist_hang PRIVATE dt_testutil)
foreach(np 1 2 3)
  add_test(NAME test_dist_hang_normal_np${np}
           COMMAND ${DT_MPIRUN} -np ${np} $<TARGET_FILE:test_dist_hang> normal)
  set_tests_properties(test_dist_hang_normal_np${np} PROPERTIES LABELS "dist;unit" TIMEOUT 60
                       PROCESSORS ${np} ENVIRONMENT "${DT_DIST_ENV}")
endforeach()
set(DT_HANG_OPS "allreduce=all-reduce" "ring=all-reduce" "f64=all-reduce \\(f64 sum\\)"
    "or=all-reduce \\(bitwise OR\\)" "broadcast=broadcast" "barrier=barrier"
    "reduce_scatter=reduce-scatter" "allgather=all-gather"
    "shared=all-reduce \\(shared memory\\)" "fence=shared-memory fence"
    "finalize=MPI_Finalize" "outside=NCCL all-reduce")
foreach(pair ${DT_HANG_OPS})
  string(REPLACE "=" ";" kv "${pair}")
  list(GET kv 0 op)
  list(GET kv 1 what)
  set(step " at step 7")
  if(op STREQUAL "finalize")
    set(step "")
  endif()
  add_test(NAME test_dist_hang_${op}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect_hang.sh 15 76
                   "^dtrain: rank 0 \\(host [^)]+\\): ${what}${step} made no progress for [23] s \\(dist.timeout_s\\): rank 1 \\(host [^,]+, pid [0-9]+\\) has not reached it; aborting the job"
                   ${DT_MPIRUN} -np 2 $<TARGET_FILE:test_dist_hang> ${op} PIDDIR)
  set_tests_properties(test_dist_hang_${op} PROPERTIES LABELS "dist;unit" TIMEOUT 60
                       PROCESSORS 2 ENVIRONMENT "${DT_DIST_ENV}")
endforeach()

# The watchdog in a training job: `dtrain train` on 2 ranks with dist.timeout_s=5, rank 1
# stopped (SIGSTOP) after step 5: exit 76 within the timeout + 20 s, rank 0's line names the
# collective and the step, no process left. (Under `dtrain launch` the job then resumes from the
# newest checkpoint: tests/launch, case hang.)
add_test(NAME test_dist_hang_train
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_hang.sh $<TARGET_FILE:dtrain>
                 ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_dist_hang_train PROPERTIES LABELS "dist;e2e" TIMEOUT 180 PROCESSORS 2
                     RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# dt_gpu_comm's host staging over 2 MPI ranks: exact sums and the communicator's bits.
add_test(NAME gpu_comm_np2 COMMAND ${DT_MPIRUN} -np 2 $<TARGET_FILE:gpu_comm> 2)
set_tests_properties(gpu_comm_np2 PROPERTIES LABELS "dist;unit" TIMEOUT 60 PROCESSORS 2
                     ENVIRONMENT "${DT_DIST_ENV}")

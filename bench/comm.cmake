# Communicator benchmark: all-reduce bus bandwidth of dt_comm against raw MPI_Allreduce.
# Run with bench/bench_comm.sh; not a test. Needs MPI.
if(MPI_C_FOUND)
  add_executable(bench_comm ${CMAKE_CURRENT_SOURCE_DIR}/bench_comm.c)
  target_link_libraries(bench_comm PRIVATE dtrain_static MPI::MPI_C)
endif()

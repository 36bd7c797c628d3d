# Data-parallel weak scaling: a whole-model training step under dt_ddp (ResNet-18, Llama 56M) at
# a fixed per-rank batch. Run with bench/bench_scaling.sh (beside PyTorch DDP gloo); not a test.
# Needs MPI.
if(MPI_C_FOUND)
  add_executable(bench_ddp ${CMAKE_CURRENT_SOURCE_DIR}/bench_ddp.c)
  target_link_libraries(bench_ddp PRIVATE dtrain_static MPI::MPI_C)
endif()

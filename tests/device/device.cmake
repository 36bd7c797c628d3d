# The device interface (src/device, docs/gpu.md). device_cpu runs everywhere; the cuda_* tests
# compare each CUDA kernel with the CPU's on the same inputs and exit 77 (reported as skipped)
# where no GPU is visible or the build has no CUDA backend.
dt_test(NAME device_cpu SOURCES device/device_cpu.c LABELS unit)
foreach(t cuda_device cuda_optim cuda_nn cuda_gemm cuda_rope cuda_embedding cuda_dropout cuda_attention
      cuda_conv cuda_batchnorm cuda_pool cuda_graph_llama cuda_graph_lora cuda_graph_resnet cuda_optim_dev)
  dt_test(NAME ${t} SOURCES device/${t}.c device/cuda_testutil.c LABELS unit gpu)
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
# The trainer on train.device=cuda against train.device=cpu (its own token dataset).
dt_test(NAME cuda_train_llama SOURCES device/cuda_train_llama.c device/cuda_testutil.c LABELS e2e gpu
        ARGS ${PROJECT_SOURCE_DIR})
set_tests_properties(cuda_train_llama PROPERTIES SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
# The same on a small ResNet (its own image dataset).
dt_test(NAME cuda_train_resnet SOURCES device/cuda_train_resnet.c device/cuda_testutil.c
        LABELS e2e gpu ARGS ${PROJECT_SOURCE_DIR})
set_tests_properties(cuda_train_resnet PROPERTIES SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
# The step as a CUDA graph: captured against eager bit for bit, and a resumed captured run.
dt_test(NAME cuda_train_capture SOURCES device/cuda_train_capture.c device/cuda_testutil.c
        LABELS e2e gpu ARGS ${PROJECT_SOURCE_DIR})
set_tests_properties(cuda_train_capture PROPERTIES SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
# Two ranks training on CUDA devices against one process of the same global batch, with each
# gradient all-reduce way (dist.gpu_comm), and a GPU rank beside a CPU rank (mixed); skipped (77)
# without a GPU, and nccl also without 2 GPUs and a loadable NCCL. A probe decides before mpirun starts (cuda_train_dist.sh).
add_executable(cuda_train_dist device/cuda_train_dist.c device/cuda_train_util.c)
target_link_libraries(cuda_train_dist PRIVATE dt_testutil)
if(MPI_C_FOUND)
  foreach(mode host nccl mixed)
    add_test(NAME cuda_train_dist_${mode}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/device/cuda_train_dist.sh
                     $<TARGET_FILE:cuda_train_dist> ${mode} ${PROJECT_SOURCE_DIR}
                     ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
    set_tests_properties(cuda_train_dist_${mode} PROPERTIES LABELS "e2e;gpu;dist" TIMEOUT 300
                         PROCESSORS 2 SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                         ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
  endforeach()
endif()

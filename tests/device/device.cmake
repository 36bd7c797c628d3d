# The device interface (src/device, docs/gpu.md). device_cpu runs everywhere; the cuda_* tests
# compare each CUDA kernel with the CPU's on the same inputs and exit 77 (reported as skipped)
# where no GPU is visible or the build has no CUDA backend.
dt_test(NAME device_cpu SOURCES device/device_cpu.c LABELS unit)
foreach(t cuda_device cuda_optim cuda_nn cuda_gemm cuda_rope cuda_embedding cuda_dropout cuda_attention)
  dt_test(NAME ${t} SOURCES device/${t}.c device/cuda_testutil.c LABELS unit gpu)
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()

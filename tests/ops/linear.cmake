# Linear family: matmul, linear (f32 and bf16 weight), embedding.
dt_ref(NAME ref_linear SCRIPT tests/ref/ref_linear.py)
dt_test(NAME linear_fd SOURCES ops/linear_fd.c LABELS unit)
dt_test(NAME linear_errors SOURCES ops/linear_errors.c LABELS unit)
dt_test(NAME linear_parity SOURCES ops/linear_parity.c LABELS parity
        FIXTURES_REQUIRED ref_linear)
# The same with OpenBLAS as the f32 GEMM (DT_SGEMM=openblas; the default is oneDNN).
dt_test(NAME linear_parity_openblas SOURCES ops/linear_parity.c LABELS parity
        FIXTURES_REQUIRED ref_linear ENV DT_SGEMM=openblas)
# The f32 fallback of the bf16 linear (CPUs without bf16 kernels), forced on any CPU.
dt_test(NAME linear_parity_bf16_f32 SOURCES ops/linear_parity.c LABELS parity
        FIXTURES_REQUIRED ref_linear ENV DT_LINEAR_BF16=f32)
# bf16 mixed precision (dt_graph_opts.bf16_gemm) of linear, matmul and conv2d against PyTorch
# CPU autocast, through the exact emulation that runs on any CPU (DT_CPU_BF16=emulate).
dt_ref_venv(NAME ref_bf16 SCRIPT tests/ref/ref_bf16.py)
dt_test(NAME bf16_parity SOURCES ops/bf16_parity.c LABELS parity FIXTURES_REQUIRED ref_bf16
        ENV DT_CPU_BF16=emulate)
# ... and with the CPU's native bf16 kernels where it has them (AVX-512 BF16/AMX; else skipped).
dt_test(NAME bf16_parity_native SOURCES ops/bf16_parity.c LABELS parity FIXTURES_REQUIRED ref_bf16
        ENV DT_TEST_BF16=native)
set_tests_properties(bf16_parity_native PROPERTIES SKIP_RETURN_CODE 77)

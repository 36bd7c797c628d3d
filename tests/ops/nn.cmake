# nn family: layernorm, rmsnorm, relu/gelu/silu, softmax, cross-entropy, dropout, and the
# copy-based shape ops (transpose, permute, concat, narrow, split).
dt_ref(NAME ref_nn SCRIPT tests/ref/ref_nn.py)
dt_test(NAME nn_fd SOURCES ops/nn_fd.c LABELS unit)
dt_test(NAME nn_errors SOURCES ops/nn_errors.c LABELS unit)
dt_test(NAME nn_dropout SOURCES ops/nn_dropout.c LABELS unit)
dt_test(NAME nn_parity SOURCES ops/nn_parity.c LABELS parity FIXTURES_REQUIRED ref_nn)

# CNN family: conv2d (oneDNN), batchnorm2d, max/avg pooling, global average pooling.
dt_ref(NAME ref_cnn SCRIPT tests/ref/ref_cnn.py)
dt_test(NAME cnn_fd SOURCES ops/cnn_fd.c LABELS unit)
dt_test(NAME cnn_errors SOURCES ops/cnn_errors.c LABELS unit)
dt_test(NAME cnn_parity SOURCES ops/cnn_parity.c LABELS parity FIXTURES_REQUIRED ref_cnn)
# Runs both block widths (16 and 8) through dt_graph_opts.layout_block, whatever the CPU's own.
dt_test(NAME cnn_layout SOURCES ops/cnn_layout.c LABELS unit)

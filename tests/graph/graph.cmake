dt_ref(NAME ref_basic SCRIPT tests/ref/ref_basic.py)
dt_test(NAME test_graph SOURCES graph/test_graph.c LABELS unit parity FIXTURES_REQUIRED ref_basic)
dt_test(NAME test_graph_device SOURCES graph/test_graph_device.c device/cuda_testutil.c LABELS unit)

dt_test(NAME test_tensor SOURCES core/test_tensor.c LABELS unit)
dt_test(NAME test_meminfo SOURCES core/test_meminfo.c LABELS unit)
dt_test(NAME test_fsinfo SOURCES core/test_fsinfo.c LABELS unit)

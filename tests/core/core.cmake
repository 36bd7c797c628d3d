dt_test(NAME test_tensor SOURCES core/test_tensor.c LABELS unit)

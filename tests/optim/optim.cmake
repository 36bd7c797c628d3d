# Optimizers, LR schedules, gradient clipping (src/optim).
dt_ref(NAME ref_optim SCRIPT tests/ref/ref_optim.py)
dt_test(NAME test_optim_unit SOURCES optim/test_optim_unit.c LABELS unit)
dt_test(NAME test_optim_parity SOURCES optim/test_optim_parity.c
        LABELS unit parity FIXTURES_REQUIRED ref_optim)
dt_test(NAME test_optim_mlp SOURCES optim/test_optim_mlp.c
        LABELS unit parity FIXTURES_REQUIRED ref_optim)

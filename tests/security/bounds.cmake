# Security (issue 12): resource bounds on everything read from files, and paths from files that
# cannot escape their directory. Hostile inputs are written by the tests themselves (small, or
# sparse files of 1 GiB that take no disk). Label unit: also run under AddressSanitizer by
# `make test-asan`.
dt_test(NAME security_bounds SOURCES security/test_bounds.c LABELS "unit;security" TIMEOUT 120)
target_link_libraries(security_bounds PRIVATE ZLIB::ZLIB)
dt_test(NAME security_paths SOURCES security/test_paths.c LABELS "unit;security" TIMEOUT 60)
dt_test(NAME security_resume_bounds SOURCES security/test_resume_bounds.c LABELS "unit;security"
        TIMEOUT 120 ENV "OMP_NUM_THREADS=1")

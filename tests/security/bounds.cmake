# Security (issue 12): resource bounds on everything read from files, and paths from files that
# cannot escape their directory. Hostile inputs are written by the tests themselves (small, or
# sparse files of 1 GiB that take no disk). Label unit: also run under AddressSanitizer by
# `make test-asan`.
dt_test(NAME security_bounds SOURCES security/test_bounds.c LABELS "unit;security" TIMEOUT 120)
target_link_libraries(security_bounds PRIVATE ZLIB::ZLIB)
dt_test(NAME security_paths SOURCES security/test_paths.c LABELS "unit;security" TIMEOUT 60)
dt_test(NAME security_resume_bounds SOURCES security/test_resume_bounds.c LABELS "unit;security"
        TIMEOUT 120 ENV "OMP_NUM_THREADS=1")
# Issue 26: every rule of the safetensors format has a file that breaks only it; dtrain refuses
# each with a message naming the file and the rule, loads the valid variants (padding, metadata,
# empty tensors), and -- with the venv's safetensors library -- agrees with the reference on all.
add_executable(st_probe security/st_probe.c)
target_link_libraries(st_probe PRIVATE dt_testutil)
set(DT_ST_SPEC_PYTHON python3)
if(EXISTS ${DT_VENV_PYTHON})
  set(DT_ST_SPEC_PYTHON ${DT_VENV_PYTHON})
endif()
add_test(NAME security_safetensors_spec
         COMMAND ${DT_ST_SPEC_PYTHON} ${PROJECT_SOURCE_DIR}/tests/security/test_safetensors_spec.py
                 $<TARGET_FILE:st_probe>)
set_tests_properties(security_safetensors_spec PROPERTIES LABELS "unit;security" TIMEOUT 120)
# The same for tokenizer.json, tiktoken rank files, dataset manifests and PEFT adapter_config.json:
# one file per rule, refused with the file, the field and the rule; the valid variants accepted.
dt_test(NAME security_parser_rules SOURCES security/test_parser_rules.c LABELS "unit;security"
        TIMEOUT 60)

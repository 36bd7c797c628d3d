# LeakSanitizer over the end-to-end tests (issue 12): in the DT_SANITIZE build (build-asan)
# `make test-asan` runs the CLI end-to-end tests (label e2e) as well as the unit tests, with
# LSAN_OPTIONS pointing at lsan.supp and LD_PRELOAD=libdt_nodlclose.so (see nodlclose.c: keeps
# Open MPI's components mapped so their allocations can be named and suppressed).
if(DT_SANITIZE)
  add_library(dt_nodlclose SHARED ${CMAKE_CURRENT_LIST_DIR}/nodlclose.c)
  # a plain library: loaded into mpirun and python too, which are not built with ASan
  set_target_properties(dt_nodlclose PROPERTIES COMPILE_OPTIONS "-O2" LINK_OPTIONS ""
                                                LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
endif()

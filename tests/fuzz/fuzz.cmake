# Fuzz targets for every parser of outside input (tests/fuzz/fuzz_<name>.c; docs/security.md).
#
# Each target is one LLVMFuzzerTestOneInput calling the library's own entry point. Two builds:
#
#  - DT_FUZZ=ON (a separate build directory configured with clang, `make fuzz-smoke`/`make fuzz`):
#    the library is compiled with -fsanitize=fuzzer-no-link,address,undefined and each target
#    links libFuzzer: executables fuzz_<name>, built by the target fuzz_all.
#  - every build: fuzz_<name>_replay, the same source with replay_main.c instead of libFuzzer,
#    registered as the CTest test fuzz_replay_<name> (label unit): it feeds the seed corpus and
#    every regression input through the target, so the ordinary and ASan CI runs keep each
#    fixed finding fixed without needing clang.
option(DT_FUZZ "Build libFuzzer targets (clang; library instrumented with ASan+UBSan)" OFF)

set(DT_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
file(GLOB DT_FUZZ_SOURCES CONFIGURE_DEPENDS ${DT_FUZZ_DIR}/fuzz_*.c)
list(REMOVE_ITEM DT_FUZZ_SOURCES ${DT_FUZZ_DIR}/fuzz_util.c)

if(DT_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DT_FUZZ needs clang (cmake -DCMAKE_C_COMPILER=clang -DDT_FUZZ=ON)")
  endif()
  # UBSan reports must stop the run (libFuzzer then saves the input), as ASan's do.
  set(DT_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
                  -fno-omit-frame-pointer)
  # (#pragma omp simd loops that the sanitizers keep from vectorizing are not errors here)
  target_compile_options(dtrain_obj PRIVATE -fsanitize=fuzzer-no-link ${DT_FUZZ_SAN}
                                            -Wno-pass-failed)
  # Anything linking the instrumented library needs the sanitizer runtimes.
  target_link_options(dtrain_static INTERFACE -fsanitize=address,undefined)
  target_link_options(dtrain_shared PUBLIC -fsanitize=address,undefined)
  add_custom_target(fuzz_all)
endif()

foreach(src ${DT_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE) # fuzz_shard
  string(REGEX REPLACE "^fuzz_" "" short ${name})
  add_executable(${name}_replay ${src} ${DT_FUZZ_DIR}/fuzz_util.c ${DT_FUZZ_DIR}/replay_main.c)
  target_include_directories(${name}_replay PRIVATE ${PROJECT_SOURCE_DIR}/src ${DT_FUZZ_DIR})
  target_link_libraries(${name}_replay PRIVATE dtrain_static)
  add_test(NAME fuzz_replay_${short}
           COMMAND ${name}_replay ${DT_FUZZ_DIR}/corpus/${short} ${DT_FUZZ_DIR}/regress)
  set_tests_properties(fuzz_replay_${short} PROPERTIES LABELS "unit;fuzz" TIMEOUT 300)
  if(DT_FUZZ)
    add_executable(${name} ${src} ${DT_FUZZ_DIR}/fuzz_util.c)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${DT_FUZZ_DIR})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer ${DT_FUZZ_SAN})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer ${DT_FUZZ_SAN})
    target_link_libraries(${name} PRIVATE dtrain_static)
    add_dependencies(fuzz_all ${name})
  endif()
endforeach()

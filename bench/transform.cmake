# Image transform benchmark (dtrain's RandomResizedCrop/Resize+CenterCrop pipeline vs
# torchvision's on PIL images): bench/bench_transform.sh.
add_executable(bench_transform ${CMAKE_CURRENT_SOURCE_DIR}/bench_transform.c)
target_include_directories(bench_transform PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_transform PRIVATE dtrain_static)

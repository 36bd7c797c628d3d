# conv2d forward/backward at ResNet shapes; run with bench/bench_conv.sh (PyTorch side:
# bench/conv_peer.py). Not a test.
add_executable(bench_conv ${CMAKE_CURRENT_SOURCE_DIR}/bench_conv.c)
target_include_directories(bench_conv PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_conv PRIVATE dtrain_static)

# Loader throughput on encoded photos (dtrain's loader vs torchvision's DataLoader):
# bench/bench_loader.sh.
add_executable(bench_loader ${CMAKE_CURRENT_SOURCE_DIR}/bench_loader.c)
target_link_libraries(bench_loader PRIVATE dtrain_static)

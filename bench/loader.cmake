# Loader throughput on encoded photos (dtrain's loader vs torchvision's DataLoader):
# bench/bench_loader.sh.
add_executable(bench_loader ${CMAKE_CURRENT_SOURCE_DIR}/bench_loader.c)
target_link_libraries(bench_loader PRIVATE dtrain_static)
# Loader throughput from s3:// vs the local copy of the same dataset: bench/bench_loader_s3.sh.
add_executable(bench_loader_s3 ${CMAKE_CURRENT_SOURCE_DIR}/bench_loader_s3.c)
target_link_libraries(bench_loader_s3 PRIVATE dtrain_static)

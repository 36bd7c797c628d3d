# Many hosts on one machine (tests/dist/netns/run_netns.sh): 2 (and 3) network namespaces joined
# by veth links, one MPI job across them through mpirun's rsh agent, checked bit for bit against
# the same job on one host. Needs root (or CAP_SYS_ADMIN) for `ip netns add`; without it the
# test reports SKIP (exit 77) instead of failing. RUN_SERIAL: the ranks take both cores.
if(MPI_FOUND)
  add_executable(netns_train dist/netns/netns_train.c)
  target_link_libraries(netns_train PRIVATE dtrain_static)
  # The fortunes_data fixture (tests/train/train.cmake) imports the corpus here.
  set(DT_NETNS_DATA ${CMAKE_BINARY_DIR}/train-data)
  foreach(hosts 2 3)
    add_test(NAME dist_netns_${hosts}hosts
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist/netns/run_netns.sh ${MPIEXEC_EXECUTABLE}
                     $<TARGET_FILE:netns_train> ${DT_NETNS_DATA} ${PROJECT_SOURCE_DIR}
                     ${CMAKE_BINARY_DIR}/netns-test/${hosts}hosts ${hosts} 20)
    set_tests_properties(dist_netns_${hosts}hosts PROPERTIES LABELS dist TIMEOUT 300
                         SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data)
  endforeach()
endif()
# The frozen LoRA base sharded across 2 namespace hosts x 1 worker under ZeRO-3
# (run_netns_shard_base.sh): the adapters of the whole base, the start lines, half the base less
# per worker, the gathers over the link. Root (or CAP_SYS_ADMIN), else SKIP.
if(MPI_FOUND)
  add_test(NAME dist_netns_shard_base
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist/netns/run_netns_shard_base.sh
                   ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:dtrain> ${CMAKE_BINARY_DIR}/train-data
                   ${PROJECT_SOURCE_DIR} ${DT_VENV_PYTHON} ${CMAKE_BINARY_DIR}/netns-test/shard_base)
  set_tests_properties(dist_netns_shard_base PROPERTIES LABELS "dist;parity" TIMEOUT 300
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data)
endif()

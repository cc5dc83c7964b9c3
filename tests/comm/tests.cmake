add_executable(comm_ranks ${CMAKE_SOURCE_DIR}/tests/comm/comm_ranks.c)
target_link_libraries(comm_ranks PRIVATE mhecore)
foreach(np 1 2 4)
  add_test(NAME comm_collectives_np${np}
    COMMAND mpirun --allow-run-as-root --oversubscribe -np ${np} $<TARGET_FILE:comm_ranks> sums)
endforeach()
add_test(NAME comm_dead_peer_ends_job COMMAND ${CMAKE_SOURCE_DIR}/tests/comm/deadline.sh $<TARGET_FILE:comm_ranks>)
add_test(NAME comm_slow_root_allowance COMMAND ${CMAKE_SOURCE_DIR}/tests/comm/allowance.sh $<TARGET_FILE:comm_ranks>)
add_test(NAME comm_reducer_layout_mismatch COMMAND ${CMAKE_SOURCE_DIR}/tests/comm/layout.sh $<TARGET_FILE:comm_ranks>)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST comm_collectives_np1 comm_collectives_np2 comm_collectives_np4
  comm_dead_peer_ends_job comm_slow_root_allowance comm_reducer_layout_mismatch APPEND PROPERTY LABELS unit dist)

# Distribution across hosts (tests/dist/): two network namespaces as two hosts.
add_test(NAME test_dist_two_hosts_netns COMMAND bash ${CMAKE_SOURCE_DIR}/tests/dist/test_two_hosts_netns.sh)
set_tests_properties(test_dist_two_hosts_netns PROPERTIES FIXTURES_REQUIRED train_corpus TIMEOUT 600
  ENVIRONMENT "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_dist_two_hosts_netns APPEND PROPERTY LABELS dist e2e)

# The quickstart (launch/quickstart.sh) end to end with a short budget.
add_test(NAME test_quickstart_end_to_end COMMAND bash ${CMAKE_SOURCE_DIR}/tests/quickstart/test_quickstart.sh)
set_tests_properties(test_quickstart_end_to_end PROPERTIES TIMEOUT 1200 ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_quickstart_end_to_end APPEND PROPERTY LABELS e2e)

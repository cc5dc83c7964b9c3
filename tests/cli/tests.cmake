add_test(NAME test_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh)
set_tests_properties(test_cli PROPERTIES ENVIRONMENT "MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_cli APPEND PROPERTY LABELS unit dist)
# MHE_* variables (README.md's table against the sources, bad values) and the launch scripts'
# arguments (issue 50).
add_test(NAME test_launch_knobs COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_launch_knobs.sh)
set_tests_properties(test_launch_knobs PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "MHETRAIN=$<TARGET_FILE:mhetrain>;MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};OMP_NUM_THREADS=1")

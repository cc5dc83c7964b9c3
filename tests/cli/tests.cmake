add_test(NAME test_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh)
set_tests_properties(test_cli PROPERTIES ENVIRONMENT "MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_cli APPEND PROPERTY LABELS unit dist)

# Config loading, validation, the shipped configs and the parameter counts (tests/config/).
mhe_add_cmocka_test(test_config tests/config/test_config.c)
mhe_add_cmocka_test(test_config_numbers tests/config/test_numbers.c)
foreach(script bad_inputs shipped_configs params_counts fuzz)
  add_test(NAME test_config_${script}
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/config/test_${script}.sh)
  set_tests_properties(test_config_${script} PROPERTIES ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
endforeach()
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_config test_config_numbers test_config_bad_inputs test_config_shipped_configs
  test_config_params_counts APPEND PROPERTY LABELS unit)
# About 80 s of whole-program runs on mutated configs.
set_property(TEST test_config_fuzz APPEND PROPERTY LABELS e2e)

# launch/compare.sh end to end on the training tests' small corpus (tests/compare/).
set(MHE_COMPARE_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
add_test(NAME test_compare_table_and_resume COMMAND bash ${CMAKE_SOURCE_DIR}/tests/compare/test_compare.sh)
set_tests_properties(test_compare_table_and_resume PROPERTIES FIXTURES_REQUIRED train_corpus
  ENVIRONMENT "${MHE_COMPARE_ENV}" TIMEOUT 600)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_compare_table_and_resume APPEND PROPERTY LABELS e2e)
# The MHE paper's own PRR and PEoP columns recomputed from its published scores through
# launch/compare/paper_table.py (tests/compare/README.md).
add_test(NAME test_compare_paper_table COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/compare/test_paper_table.py)
set_tests_properties(test_compare_paper_table PROPERTIES ENVIRONMENT "${MHE_COMPARE_ENV}" TIMEOUT 60 LABELS unit)
# launch/reproduce.sh: configs/paper shrunk to tiny sizes, plan then --run end to end.
add_test(NAME test_reproduce_tiny COMMAND bash ${CMAKE_SOURCE_DIR}/tests/compare/test_reproduce.sh)
set_tests_properties(test_reproduce_tiny PROPERTIES FIXTURES_REQUIRED train_corpus
  ENVIRONMENT "${MHE_COMPARE_ENV}" TIMEOUT 400 LABELS e2e)
# compare_util.py / compare.sh on metrics files with diverged, torn, step-less and unfinished runs.
add_test(NAME test_compare_reads_any_metrics COMMAND bash ${CMAKE_SOURCE_DIR}/tests/compare/test_compare_metrics.sh)
set_tests_properties(test_compare_reads_any_metrics PROPERTIES FIXTURES_REQUIRED train_corpus
  ENVIRONMENT "${MHE_COMPARE_ENV}" TIMEOUT 120 LABELS unit)

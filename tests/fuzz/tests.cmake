# A deterministic fuzz pass over every kind of input mhetrain reads (tests/fuzz/README.md): no
# crash, no hang, no silent success on a detectable corruption, one-line errors naming the file.
add_test(NAME test_fuzz_inputs COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_inputs.py)
set_tests_properties(test_fuzz_inputs PROPERTIES FIXTURES_REQUIRED train_corpus ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1"
  TIMEOUT 600 LABELS e2e)

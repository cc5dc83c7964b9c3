# Tokenizers: API unit tests (cmocka), malformed files, id parity with Hugging Face
# `tokenizers` (venv oracle) on the books and Wikipedia text of ../shared/data, and the
# trainer against a naive BPE trainer.
mhe_add_cmocka_test(tokenizer_unit ${CMAKE_SOURCE_DIR}/tests/tokenizer/test_tokenizer.c)
target_link_libraries(tokenizer_unit PRIVATE pthread)

set(MHE_TOKENIZER_TEST_ENV
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2;TOKENIZERS_PARALLELISM=true")
foreach(t bad_inputs parity train_oracle unicode_parity)
  add_test(NAME tokenizer_${t}
    COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/tokenizer/${t}.py)
  set_tests_properties(tokenizer_${t} PROPERTIES ENVIRONMENT "${MHE_TOKENIZER_TEST_ENV}")
endforeach()
set_tests_properties(tokenizer_parity tokenizer_unicode_parity PROPERTIES TIMEOUT 600)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST tokenizer_unit tokenizer_bad_inputs APPEND PROPERTY LABELS unit)
set_property(TEST tokenizer_parity tokenizer_train_oracle tokenizer_unicode_parity
  APPEND PROPERTY LABELS oracle)

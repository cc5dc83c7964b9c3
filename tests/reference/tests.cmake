# The PyTorch oracle's self-checks (identities between attention variants, finite differences,
# masks, file formats; Hugging Face BERT/GPT-2 when transformers is importable). Debian's python3
# carries torch; the venv only adds optional packages.
add_test(NAME reference_oracle_selftest
  COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/reference/test_ref_model.py)
set_tests_properties(reference_oracle_selftest PROPERTIES TIMEOUT 900 LABELS reference ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST reference_oracle_selftest APPEND PROPERTY LABELS oracle)

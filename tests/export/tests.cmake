# mhetrain export against Hugging Face transformers (venv): every arch x attention type loads
# with from_pretrained, AutoTokenizer gives our ids, logits equal ours; bad inputs exit 2.
mhe_add_cmocka_test(export_matches_transformers ${CMAKE_SOURCE_DIR}/tests/export/test_export.c)
add_dependencies(export_matches_transformers mhetrain)
set_tests_properties(export_matches_transformers PROPERTIES TIMEOUT 600 LABELS export)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST export_matches_transformers APPEND PROPERTY LABELS oracle)
# Exports written whole: a full disk (a small tmpfs in a private mount namespace) leaves the
# previous export loadable; --force replaces whole; refusals without it.
add_test(NAME test_export_atomic COMMAND bash ${CMAKE_SOURCE_DIR}/tests/export/test_export_atomic.sh)
set_tests_properties(test_export_atomic PROPERTIES TIMEOUT 300 LABELS "e2e;export" ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;MHE_MAKE_CHECKPOINT=$<TARGET_FILE:hf_make_checkpoint>;OMP_NUM_THREADS=1")
# A kill -9'd export's staging folder removed by the next export into the same --out, which says
# so; a symlink --out refused naming the link (issue 50).
add_test(NAME test_export_litter COMMAND bash ${CMAKE_SOURCE_DIR}/tests/export/test_export_litter.sh)
set_tests_properties(test_export_litter PROPERTIES TIMEOUT 120 LABELS "e2e;export" ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;MHE_MAKE_CHECKPOINT=$<TARGET_FILE:hf_make_checkpoint>;OMP_NUM_THREADS=1")

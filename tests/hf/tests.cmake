# The exports' remote code with Hugging Face transformers (venv python): every Auto class, the
# embedding accessors and resize, attentions, the heads' losses (oracle), and a transformers
# Trainer fine-tuning an MHE export for one epoch (e2e).  hf_make_checkpoint writes the small
# random checkpoints the scripts export.
add_executable(hf_make_checkpoint ${CMAKE_SOURCE_DIR}/tests/hf/make_checkpoint.c)
target_link_libraries(hf_make_checkpoint PRIVATE mhe_testutil mhecore)
set(MHE_HF_TEST_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;MHE_MAKE_CHECKPOINT=$<TARGET_FILE:hf_make_checkpoint>;OMP_NUM_THREADS=2;HF_HUB_OFFLINE=1;TRANSFORMERS_OFFLINE=1")
foreach(t test_auto_classes test_trainer)
  add_test(NAME hf_${t} COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/hf/${t}.py)
  set_tests_properties(hf_${t} PROPERTIES TIMEOUT 900 ENVIRONMENT "${MHE_HF_TEST_ENV}")
endforeach()
set_tests_properties(hf_test_auto_classes PROPERTIES LABELS "oracle;export")
# ~2 min on a quiet machine; 9 min measured with the load average at 80
set_tests_properties(hf_test_trainer PROPERTIES LABELS "e2e;export" TIMEOUT 1800)
# Fine-tuned checkpoints (issue 14): hf_task_outputs gives mhetrain's outputs of a task model;
# test_task_export compares them with the exported Auto classes (oracle), test_finetune_export
# runs mhetrain finetune and scores the export's dev split with transformers (e2e).
add_executable(hf_task_outputs ${CMAKE_SOURCE_DIR}/tests/hf/task_outputs.c)
target_link_libraries(hf_task_outputs PRIVATE mhecore)
foreach(t test_task_export test_finetune_export)
  add_test(NAME hf_${t} COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/hf/${t}.py)
  set_tests_properties(hf_${t} PROPERTIES TIMEOUT 1800 ENVIRONMENT
    "${MHE_HF_TEST_ENV};MHE_TASK_OUTPUTS=$<TARGET_FILE:hf_task_outputs>")
endforeach()
set_tests_properties(hf_test_task_export PROPERTIES LABELS "oracle;export")
set_tests_properties(hf_test_finetune_export PROPERTIES LABELS "e2e;export")

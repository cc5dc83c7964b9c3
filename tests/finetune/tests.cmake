# Fine-tuning data and metrics (trainer/task/, issue 14): readers against Hugging Face's GLUE and
# SQuAD processors, metrics against scikit-learn / SciPy / the official SQuAD metrics, every
# bad-row message; the derived tasks generator.  task_dump prints what the library does as JSON.
add_executable(task_dump ${CMAKE_SOURCE_DIR}/tests/finetune/task_dump.c)
target_link_libraries(task_dump PRIVATE mhecore)
set(MHE_FINETUNE_TEST_ENV
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;TASK_DUMP=$<TARGET_FILE:task_dump>;OMP_NUM_THREADS=2")
foreach(t readers bad_rows metrics squad_features make_tasks)
  add_test(NAME finetune_${t}
    COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/finetune/test_${t}.py)
  set_tests_properties(finetune_${t} PROPERTIES ENVIRONMENT "${MHE_FINETUNE_TEST_ENV}")
endforeach()
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST finetune_bad_rows finetune_make_tasks APPEND PROPERTY LABELS unit)
set_property(TEST finetune_readers finetune_metrics finetune_squad_features APPEND PROPERTY LABELS oracle)

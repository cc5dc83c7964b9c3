# mhetrain import / convert against transformers and tensorly (venv python; seconds each).
foreach(t test_import test_convert)
  add_test(NAME ${t} COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/import/${t}.py)
  set_tests_properties(${t} PROPERTIES TIMEOUT 300 LABELS oracle ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
endforeach()

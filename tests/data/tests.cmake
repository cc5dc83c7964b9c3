# Corpus readers, wikitext cleaning, shards, prepare and the loader (tests/data/).
mhe_add_cmocka_test(test_corpus tests/data/test_corpus.c)
mhe_add_cmocka_test(test_loader tests/data/test_loader.c)
mhe_add_cmocka_test(test_loader_config tests/data/test_loader_config.c)
add_executable(shard_tool tests/data/shard_tool.c)
target_link_libraries(shard_tool PRIVATE mhecore)
foreach(check wiki_dump shards_python prepare_determinism bad_inputs bounded_memory fuzz_inputs)
  add_test(NAME test_data_${check}
    COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/data/test_prepare.py ${check})
  set_tests_properties(test_data_${check} PROPERTIES ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;SHARD_TOOL=$<TARGET_FILE:shard_tool>;OMP_NUM_THREADS=2")
endforeach()
# The same bad file gets the same line from every command that reads it (needs the training
# fixture's corpus for the tokenizer, shards and a run to evaluate).
add_test(NAME test_data_same_strictness COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data/test_same_strictness.sh)
set_tests_properties(test_data_same_strictness PROPERTIES FIXTURES_REQUIRED train_corpus ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1"
  TIMEOUT 300 LABELS e2e)
foreach(check prepare_lock wikiextractor_json)
  add_test(NAME test_data_${check} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/data/test_${check}.sh)
  set_tests_properties(test_data_${check} PROPERTIES LABELS unit ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
endforeach()
foreach(check book_chapters valid_split fetch_script)
  add_test(NAME test_data_${check}
    COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/data/test_split.py ${check})
  set_tests_properties(test_data_${check} PROPERTIES ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;SHARD_TOOL=$<TARGET_FILE:shard_tool>;OMP_NUM_THREADS=2")
endforeach()
# Parquet, Arrow (stream and file) and JSON lines on standard input against the JSON-lines path.
add_test(NAME test_data_prepare_tables
  COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/data/test_prepare_tables.py)
set_tests_properties(test_data_prepare_tables PROPERTIES TIMEOUT 300 ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;SHARD_TOOL=$<TARGET_FILE:shard_tool>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_corpus test_loader test_loader_config APPEND PROPERTY LABELS unit)
set_property(TEST test_data_wiki_dump test_data_shards_python APPEND PROPERTY LABELS oracle)
set_property(TEST test_data_book_chapters test_data_fetch_script APPEND PROPERTY LABELS unit)
set_property(TEST test_data_valid_split APPEND PROPERTY LABELS e2e)
set_property(TEST test_data_prepare_determinism test_data_bad_inputs test_data_bounded_memory
  test_data_fuzz_inputs test_data_prepare_tables APPEND PROPERTY LABELS e2e)
# NUL characters in JSON lines and parquet never cut a document; parquet's invalid UTF-8 by file row (issue 50).
add_test(NAME test_data_prepare_nul
  COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/data/test_prepare_nul.py)
set_tests_properties(test_data_prepare_nul PROPERTIES TIMEOUT 120 LABELS e2e ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;SHARD_TOOL=$<TARGET_FILE:shard_tool>;OMP_NUM_THREADS=2")
# Plain-text books streamed in bounded memory, with the whole-file reader's output (issue 50).
foreach(check identical memory)
  add_test(NAME test_data_prepare_stream_${check}
    COMMAND ${CMAKE_SOURCE_DIR}/.venv/bin/python ${CMAKE_SOURCE_DIR}/tests/data/test_prepare_stream.py ${check})
  set_tests_properties(test_data_prepare_stream_${check} PROPERTIES TIMEOUT 300 LABELS e2e ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
endforeach()

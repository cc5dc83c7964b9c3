# Shared test fixtures (tests/common/): linked into every cmocka test by mhe_add_cmocka_test and
# into the CUDA tests that use them.  No tests of its own.
add_library(mhe_testutil STATIC ${CMAKE_SOURCE_DIR}/tests/common/test_util.c)
target_link_libraries(mhe_testutil PUBLIC mhecore)

# Docs that cannot drift (tests/docs/): every folder README's file table against the folder's
# files, and DESIGN.md §3's layout against the libraries' DEPS in CMakeLists.txt.  Standard
# library Python, a fraction of a second each.
add_test(NAME test_docs_file_tables
  COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/docs/check_file_tables.py ${CMAKE_SOURCE_DIR}
          trainer kernels comm data launch tests)
add_test(NAME test_docs_layout COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/docs/check_layout.py ${CMAKE_SOURCE_DIR})
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_docs_file_tables test_docs_layout APPEND PROPERTY LABELS unit)

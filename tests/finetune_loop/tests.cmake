# The fine-tuning loop (trainer/train/finetune.c, issue 14) on the training tests' corpus fixture.
set(MHE_FT_LOOP_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
foreach(name loop dist engine init_from_ranks)
  add_test(NAME test_finetune_${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/finetune_loop/test_finetune_${name}.sh)
  set_tests_properties(test_finetune_${name} PROPERTIES FIXTURES_REQUIRED train_corpus
    ENVIRONMENT "${MHE_FT_LOOP_ENV}" TIMEOUT 600)
endforeach()
# The derived tasks (tests/finetune/make_tasks.py), pretrained vs random initialisation.
add_test(NAME test_finetune_e2e COMMAND bash ${CMAKE_SOURCE_DIR}/tests/finetune_loop/test_finetune_e2e.sh)
set_tests_properties(test_finetune_e2e PROPERTIES FIXTURES_REQUIRED train_corpus TIMEOUT 900
  ENVIRONMENT "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_finetune_loop test_finetune_e2e APPEND PROPERTY LABELS e2e)
set_property(TEST test_finetune_dist test_finetune_engine test_finetune_init_from_ranks APPEND PROPERTY LABELS dist)
# The same loop on the emulated CUDA backend (mhetrain_emu) against the CPU backend.
if(TARGET mhetrain_emu)
  add_test(NAME test_finetune_cuda COMMAND bash ${CMAKE_SOURCE_DIR}/tests/finetune_loop/test_finetune_cuda.sh)
  set_tests_properties(test_finetune_cuda PROPERTIES FIXTURES_REQUIRED train_corpus TIMEOUT 900 LABELS "cuda;dist"
    ENVIRONMENT "${MHE_FT_LOOP_ENV};MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>;ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32;MHE_EMU_DEVICES=2")
endif()

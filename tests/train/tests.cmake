# Training runs end to end on a small real corpus (tests/train/).
set(MHE_TRAIN_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=1")
add_test(NAME train_corpus_fixture COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/make_corpus.sh)
set_tests_properties(train_corpus_fixture PROPERTIES FIXTURES_SETUP train_corpus ENVIRONMENT "${MHE_TRAIN_ENV}")
foreach(name resume_is_bit_exact resume_bf16_is_bit_exact recompute_is_bit_exact sigterm_checkpoints_and_resumes init_from_loads_weights_only nonfinite_policy world_sizes_agree zero1_matches_zero0 dead_rank_ends_job
    unusable_checkpoints_refuse out_dir_lock signals_exit_status resume_identity write_failures_end_run
    nonfinite_weights_and_empty_data divergence_named truncated_shard_while_training inconsistent_settings eval_whole_split
    settings_against_data eval_export_lock ranks_disagree mpirun_sigterm slurm_sigterm precision_auto time_limit_stops)
  add_test(NAME test_train_${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/train/test_${name}.sh)
  set_tests_properties(test_train_${name} PROPERTIES FIXTURES_REQUIRED train_corpus ENVIRONMENT "${MHE_TRAIN_ENV}"
    TIMEOUT 600 LABELS e2e)
endforeach()
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST train_corpus_fixture APPEND PROPERTY LABELS e2e)
set_property(TEST test_train_world_sizes_agree test_train_zero1_matches_zero0
  test_train_dead_rank_ends_job test_train_ranks_disagree test_train_mpirun_sigterm APPEND PROPERTY LABELS dist)

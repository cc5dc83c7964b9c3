# Training-run infrastructure: schedules, optimizers, checkpoints, event files, metrics, signals.
set(INFRA ${CMAKE_SOURCE_DIR}/tests/infra)
mhe_add_cmocka_test(test_infra_hashes ${INFRA}/test_hashes.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_schedule ${INFRA}/test_schedule.c)
mhe_add_cmocka_test(test_infra_optim ${INFRA}/test_optim.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_checkpoint ${INFRA}/test_checkpoint.c ${INFRA}/infra_util.c)
add_executable(ckpt_crash_writer ${INFRA}/ckpt_crash_writer.c ${INFRA}/infra_util.c)
target_link_libraries(ckpt_crash_writer PRIVATE mhecore)
mhe_add_cmocka_test(test_infra_checkpoint_crash ${INFRA}/test_checkpoint_crash.c ${INFRA}/infra_util.c)
add_dependencies(test_infra_checkpoint_crash ckpt_crash_writer)
set_property(TEST test_infra_checkpoint_crash APPEND PROPERTY ENVIRONMENT "MHE_CKPT_WRITER=$<TARGET_FILE:ckpt_crash_writer>")
mhe_add_cmocka_test(test_infra_tensorboard ${INFRA}/test_tensorboard.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_metrics ${INFRA}/test_metrics.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_signals ${INFRA}/test_signals.c)
mhe_add_cmocka_test(test_infra_precision_auto ${INFRA}/test_precision_auto.c)
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST test_infra_hashes test_infra_schedule test_infra_optim test_infra_checkpoint
  test_infra_checkpoint_crash test_infra_tensorboard test_infra_metrics test_infra_signals
  test_infra_precision_auto APPEND PROPERTY LABELS unit)
# Against torch.optim and TensorBoard's own reader.
set_property(TEST test_infra_optim test_infra_tensorboard APPEND PROPERTY LABELS oracle)

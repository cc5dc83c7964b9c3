# Training-run infrastructure: schedules, optimizers, checkpoints, event files, metrics, signals.
set(INFRA ${CMAKE_SOURCE_DIR}/tests/infra)
mhe_add_cmocka_test(test_infra_hashes ${INFRA}/test_hashes.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_schedule ${INFRA}/test_schedule.c)
mhe_add_cmocka_test(test_infra_optim ${INFRA}/test_optim.c ${INFRA}/infra_util.c)
mhe_add_cmocka_test(test_infra_checkpoint ${INFRA}/test_checkpoint.c ${INFRA}/infra_util.c)

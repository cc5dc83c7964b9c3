# CUDA backend tests, run through the CPU emulation of CUDA (kernels/cuda/emu) under ASan.
if(TARGET mhecuda_emu)
  set(MHE_CUDA_TEST_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};OMP_NUM_THREADS=2;ASAN_OPTIONS=detect_leaks=1")

  add_executable(test_cuda_emu_reduce ${CMAKE_CURRENT_LIST_DIR}/test_emu_reduce.cpp)
  target_link_libraries(test_cuda_emu_reduce PRIVATE mhecore mhecuda_emu)
  add_test(NAME test_cuda_emu_reduce COMMAND test_cuda_emu_reduce)
  set_tests_properties(test_cuda_emu_reduce PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 120)

  # The emulation's strictness (issue 29 B): each rule broken by a test kernel in a child process.
  add_executable(test_cuda_emu_strict ${CMAKE_CURRENT_LIST_DIR}/test_emu_strict.cpp)
  target_link_libraries(test_cuda_emu_strict PRIVATE mhecore mhecuda_emu)
  add_test(NAME test_cuda_emu_strict COMMAND test_cuda_emu_strict)
  set_tests_properties(test_cuda_emu_strict PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0"
    TIMEOUT 300 LABELS "unit;cuda")

  # The `tsan` tier: a few representative emulated tests against mhecuda_emu_tsan, the blocks of
  # every grid two at a time in a shuffled order (MHE_EMU_SHUFFLE), so a race between the
  # threads of a block or between blocks, in shared or global memory, is reported and fails the
  # test (halt_on_error).  The CPU reference runs single-threaded (OMP_NUM_THREADS=1): its
  # OpenMP threads are not ours to audit.
  if(TARGET mhecuda_emu_tsan)
    set(MHE_TSAN_ENV "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};OMP_NUM_THREADS=1;TSAN_OPTIONS=halt_on_error=1:exitcode=66:history_size=4")
    foreach(t emu_strict parity mhe_ops)
      set(src ${CMAKE_CURRENT_LIST_DIR}/test_cuda_${t}.c)
      if(t STREQUAL emu_strict)
        set(src ${CMAKE_CURRENT_LIST_DIR}/test_emu_strict.cpp)
      endif()
      add_executable(test_cuda_${t}_tsan ${src})
      target_link_libraries(test_cuda_${t}_tsan PRIVATE mhecore mhecuda_emu_tsan PkgConfig::CMOCKA)
      add_test(NAME test_cuda_${t}_tsan COMMAND test_cuda_${t}_tsan)
      set_tests_properties(test_cuda_${t}_tsan PROPERTIES ENVIRONMENT "${MHE_TSAN_ENV};MHE_EMU_SHUFFLE=29"
        TIMEOUT 900 LABELS "tsan;cuda")
    endforeach()
    # The strict test's own shuffled cases set the order themselves.
    set_tests_properties(test_cuda_emu_strict_tsan PROPERTIES ENVIRONMENT "${MHE_TSAN_ENV}")
    # Parity under TSan costs ~15x its ASan time: LayerNorm's backward with dropout (block sums
    # through shared memory and shuffles, dγ/dβ partials over many blocks, their column-sum
    # stage 2) stands for the row kernels; test_cuda_mhe_ops_tsan covers the tensor-core attention.
    set_tests_properties(test_cuda_parity_tsan PROPERTIES
      ENVIRONMENT "${MHE_TSAN_ENV};MHE_EMU_SHUFFLE=29;MHE_TEST_FILTER=*layernorm_backward_dropout*")
  endif()

  add_executable(test_cuda_parity ${CMAKE_CURRENT_LIST_DIR}/test_cuda_parity.c)
  target_link_libraries(test_cuda_parity PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_parity COMMAND test_cuda_parity)
  set_tests_properties(test_cuda_parity PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 900)

  # The attention core's three paths, its tensor-core kernels and their dK/dV head-group splits.
  add_executable(test_cuda_attention ${CMAKE_CURRENT_LIST_DIR}/test_cuda_attention.c)
  target_link_libraries(test_cuda_attention PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_attention COMMAND test_cuda_attention)
  set_tests_properties(test_cuda_attention PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 1500)

  # mhe_mul's optional glue ops (head_scales, head_expand_backward_prod) against the CPU ops they replace.
  add_executable(test_cuda_mhe_ops ${CMAKE_CURRENT_LIST_DIR}/test_cuda_mhe_ops.c)
  target_link_libraries(test_cuda_mhe_ops PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_mhe_ops COMMAND test_cuda_mhe_ops)
  set_tests_properties(test_cuda_mhe_ops PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 300 LABELS "unit;cuda")

  # bf16 activations (a bf16 run's default): every op taking an Act against the CPU backend in fp32.
  add_executable(test_cuda_act ${CMAKE_CURRENT_LIST_DIR}/test_cuda_act.c)
  target_link_libraries(test_cuda_act PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_act COMMAND test_cuda_act)
  set_tests_properties(test_cuda_act PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 300 LABELS "unit;cuda")

  # Deferred column sums: one launch for every parameter gradient's stage 2, bit-identical to at once.
  add_executable(test_cuda_defer ${CMAKE_CURRENT_LIST_DIR}/test_cuda_defer.c)
  target_link_libraries(test_cuda_defer PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_defer COMMAND test_cuda_defer)
  set_tests_properties(test_cuda_defer PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 120 LABELS "unit;cuda")

  # The cost model in record-only mode: per-call bytes/FLOPs vs hand figures, step FLOPs vs
  # model_step_flops.
  add_executable(test_cuda_cost ${CMAKE_CURRENT_LIST_DIR}/test_cuda_cost.c)
  target_link_libraries(test_cuda_cost PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_cost COMMAND test_cuda_cost)
  set_tests_properties(test_cuda_cost PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 120 LABELS "unit;cuda")
  add_executable(test_cuda_cost_expect ${CMAKE_CURRENT_LIST_DIR}/test_cuda_cost_expect.c)
  target_link_libraries(test_cuda_cost_expect PRIVATE mhe_testutil mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_cost_expect COMMAND test_cuda_cost_expect)
  set_tests_properties(test_cuda_cost_expect PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV}" TIMEOUT 120 LABELS "unit;cuda")

  add_executable(test_cuda_model ${CMAKE_CURRENT_LIST_DIR}/test_cuda_model.c)
  target_link_libraries(test_cuda_model PRIVATE mhe_testutil mhecore mhecuda_emu PkgConfig::CMOCKA)
  # One warp per row-kernel block here: test_cuda_parity covers the cross-warp reductions, and
  # the emulation's cost grows with threads per block.
  foreach(part variants training)
    add_test(NAME test_cuda_model_${part} COMMAND test_cuda_model ${part})
    set_tests_properties(test_cuda_model_${part} PROPERTIES
      ENVIRONMENT "${MHE_CUDA_TEST_ENV};MHE_EMU_BLOCK=32" TIMEOUT 900)
  endforeach()

  # The fine-tuning heads (issue 14) on the emulated CUDA backend against the CPU backend.
  add_executable(test_cuda_task ${CMAKE_CURRENT_LIST_DIR}/test_cuda_task.c)
  target_link_libraries(test_cuda_task PRIVATE mhe_testutil mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_task_heads COMMAND test_cuda_task)
  set_tests_properties(test_cuda_task_heads PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};MHE_EMU_BLOCK=32" TIMEOUT 900 LABELS cuda)

  # train.recompute through the emulated CUDA backend, fp32 and bf16 (tests/model/test_recompute.c
  # built against it): attention / layer = none bit for bit; in bf16 the emulation checks every
  # bf16 weight copy a matmul reads.
  add_executable(test_cuda_recompute ${CMAKE_SOURCE_DIR}/tests/model/test_recompute.c)
  target_compile_definitions(test_cuda_recompute PRIVATE MHE_TEST_CUDA)
  target_link_libraries(test_cuda_recompute PRIVATE mhe_testutil mhecore mhecuda_emu PkgConfig::CMOCKA)
  foreach(prec cuda cuda_bf16)
    add_test(NAME test_${prec}_recompute COMMAND test_cuda_recompute ${prec})
    set_tests_properties(test_${prec}_recompute PROPERTIES
      ENVIRONMENT "${MHE_CUDA_TEST_ENV};MHE_EMU_BLOCK=32" TIMEOUT 900 LABELS cuda)
  endforeach()
  # bf16 with every grid's blocks shuffled, two at a time (MHE_EMU_SHUFFLE): the runs it compares
  # bit for bit launch their blocks in different orders, so a kernel whose result depends on the
  # order of its blocks shows up as a difference between runs.
  set_tests_properties(test_cuda_bf16_recompute PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};MHE_EMU_BLOCK=32;MHE_EMU_SHUFFLE=11")

  # NCCL served by MPI: two ranks, each with its own emulated GPU.
  add_executable(test_cuda_nccl ${CMAKE_CURRENT_LIST_DIR}/test_cuda_nccl.c)
  target_link_libraries(test_cuda_nccl PRIVATE mhe_testutil mhecore mhecuda_emu)
  add_test(NAME test_cuda_nccl_np2
    COMMAND mpirun --allow-run-as-root --oversubscribe -np 2 $<TARGET_FILE:test_cuda_nccl>)
  # MPI's own allocations are not ours to audit.
  set_tests_properties(test_cuda_nccl_np2 PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32" TIMEOUT 300)
  add_test(NAME test_cuda_nccl_dead_peer_ends_job
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/nccl_dead_peer.sh $<TARGET_FILE:test_cuda_nccl>)
  set_tests_properties(test_cuda_nccl_dead_peer_ends_job PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32" TIMEOUT 120)

  # The real trainer (mhetrain_emu) with runtime.device: cuda on the emulated GPU, on the corpus
  # of the tests/train fixture: losses track runtime.device: cpu, at 1 and 2 ranks.
  add_test(NAME test_cuda_train_end_to_end COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_train_e2e.sh)
  set_tests_properties(test_cuda_train_end_to_end PROPERTIES FIXTURES_REQUIRED train_corpus
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32;MHE_EMU_DEVICES=2;MHETRAIN=$<TARGET_FILE:mhetrain>;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 900)
  # runtime.device: cuda refuses a model larger than the device's free memory before allocating
  # (an emulated device of MHE_EMU_DEVICE_MEMORY bytes).
  add_test(NAME test_cuda_device_memory_check COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_device_memory.sh)
  set_tests_properties(test_cuda_device_memory_check PROPERTIES FIXTURES_REQUIRED train_corpus
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32;MHETRAIN=$<TARGET_FILE:mhetrain>;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 300 LABELS "e2e;cuda")
  # The attention-core registry's choice for every variant x feature (test_attn_cores.cpp).
  add_executable(test_cuda_attn_cores ${CMAKE_CURRENT_LIST_DIR}/test_attn_cores.cpp)
  target_include_directories(test_cuda_attn_cores PRIVATE ${CMAKE_BINARY_DIR}/cuda_emu)
  target_link_libraries(test_cuda_attn_cores PRIVATE mhecore mhecuda_emu PkgConfig::CMOCKA)
  add_test(NAME test_cuda_attn_cores COMMAND test_cuda_attn_cores)
  set_tests_properties(test_cuda_attn_cores PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0"
    TIMEOUT 120 LABELS "cuda;unit")
  # Streams and events: the emulation refuses their misuse; the cost model's two-stream timeline
  # through the overlapped NCCL path on hand-computed cases (an MPI singleton: MPI's allocations
  # for the life of the process are not leaks of ours).
  add_executable(test_cuda_streams ${CMAKE_CURRENT_LIST_DIR}/test_cuda_streams.cpp)
  target_link_libraries(test_cuda_streams PRIVATE mhecore mhecuda_emu)
  add_test(NAME test_cuda_streams COMMAND test_cuda_streams)
  set_tests_properties(test_cuda_streams PROPERTIES ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0"
    TIMEOUT 120 LABELS "unit;cuda")
  # The 2-rank NCCL training run with the all-reduce overlapped (device buckets on a second
  # stream) equals the run without overlap bit for bit.
  add_test(NAME test_cuda_nccl_overlap_bit_exact COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_nccl_overlap.sh)
  set_tests_properties(test_cuda_nccl_overlap_bit_exact PROPERTIES FIXTURES_REQUIRED train_corpus
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHE_EMU_BLOCK=32;MHE_EMU_DEVICES=2;MHETRAIN=$<TARGET_FILE:mhetrain>;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 600 LABELS "e2e;cuda;dist")
  add_test(NAME test_cuda_bench_zero COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_bench_zero.sh)
  set_tests_properties(test_cuda_bench_zero PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 300 LABELS "cuda;dist")
  add_test(NAME test_cuda_bench_peak COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_bench_peak.sh)
  set_tests_properties(test_cuda_bench_peak PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 300 LABELS "cuda")
  # The expected step against the H100 measurement it was fitted to (CALIBRATION.md).
  add_test(NAME test_cuda_cost_calibration COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cost_calibration.sh)
  set_tests_properties(test_cuda_cost_calibration PROPERTIES
    ENVIRONMENT "${MHE_CUDA_TEST_ENV};ASAN_OPTIONS=detect_leaks=0;MHETRAIN_EMU=$<TARGET_FILE:mhetrain_emu>"
    TIMEOUT 300 LABELS "cuda")
  # Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
  set_property(TEST test_cuda_emu_reduce test_cuda_parity test_cuda_attention test_cuda_cost test_cuda_model_variants
    test_cuda_model_training test_cuda_nccl_np2 test_cuda_nccl_dead_peer_ends_job
    test_cuda_train_end_to_end test_cuda_cost APPEND PROPERTY LABELS cuda)
  set_property(TEST test_cuda_emu_reduce test_cuda_nccl_np2 test_cuda_nccl_dead_peer_ends_job
    APPEND PROPERTY LABELS unit)
  set_property(TEST test_cuda_nccl_np2 test_cuda_nccl_dead_peer_ends_job test_cuda_train_end_to_end
    APPEND PROPERTY LABELS dist)
  set_property(TEST test_cuda_train_end_to_end APPEND PROPERTY LABELS e2e)
endif()

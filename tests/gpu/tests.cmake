# Tools for machines with a GPU (tests/gpu/run.sh, check.sh); built with the CUDA backend, never
# run on a GPU by ctest (CI has none; the same checks run there through the emulation, tests/cuda).
# The ctests here prove the GPU tooling without one.
if(TARGET mhecuda)
  add_executable(gpu_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_bench.c)
  target_link_libraries(gpu_bench PRIVATE mhecore mhecuda)
  add_executable(gpu_attn_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_attn_bench.c)
  target_link_libraries(gpu_attn_bench PRIVATE mhecore mhecuda)
  # The same against the emulation in record-only mode: the host's cost per attention call.
  add_executable(gpu_attn_bench_emu ${CMAKE_CURRENT_LIST_DIR}/gpu_attn_bench.c)
  target_link_libraries(gpu_attn_bench_emu PRIVATE mhecore mhecuda_emu)
  # gpu_bench against the emulation: its accumulation (--accum, the large MFU configs of check.sh)
  # and MFU line, on a tiny model (test_gpu_bench_accum.sh).
  add_executable(gpu_bench_emu ${CMAKE_CURRENT_LIST_DIR}/gpu_bench.c)
  target_link_libraries(gpu_bench_emu PRIVATE mhecore mhecuda_emu)
  add_test(NAME test_gpu_bench_accum COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_gpu_bench_accum.sh)
  set_tests_properties(test_gpu_bench_accum PROPERTIES
    ENVIRONMENT "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};GPU_BENCH_EMU=$<TARGET_FILE:gpu_bench_emu>;OMP_NUM_THREADS=2;ASAN_OPTIONS=detect_leaks=0"
    TIMEOUT 300 LABELS "cuda;unit")
  # The parity (ops, attention, the ops on bf16 activations), model and NCCL tests of tests/cuda,
  # linked against the real backend.
  add_executable(gpu_parity ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_parity.c)
  target_link_libraries(gpu_parity PRIVATE mhecore mhecuda PkgConfig::CMOCKA)
  add_executable(gpu_act ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_act.c)
  target_link_libraries(gpu_act PRIVATE mhecore mhecuda PkgConfig::CMOCKA)
  add_executable(gpu_attention ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_attention.c)
  target_link_libraries(gpu_attention PRIVATE mhecore mhecuda PkgConfig::CMOCKA)
  add_executable(gpu_model ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_model.c)
  target_link_libraries(gpu_model PRIVATE mhe_testutil mhecore mhecuda PkgConfig::CMOCKA)
  add_executable(gpu_nccl ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_nccl.c)
  target_link_libraries(gpu_nccl PRIVATE mhe_testutil mhecore mhecuda)
  # The bundle from this build on a minimal root without a GPU (chroot; root only, else skipped).
  add_test(NAME test_gpu_bundle_bare COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_bundle_bare.sh)
  set_tests_properties(test_gpu_bundle_bare PROPERTIES
    ENVIRONMENT "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BUILD_DIR=${CMAKE_BINARY_DIR}"
    SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "cuda;e2e")
endif()

# The cuDNN attention core's graphs for every variant, validated without a GPU against the
# toolkit's cuDNN (tests/cuda/test_cudnn_graphs.c); built where the core is.
if(TARGET mhecudnn)
  add_executable(test_cudnn_graphs ${CMAKE_SOURCE_DIR}/tests/cuda/test_cudnn_graphs.c)
  target_include_directories(test_cudnn_graphs PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(test_cudnn_graphs PRIVATE mhecore mhecuda)
  add_test(NAME test_cudnn_graphs COMMAND test_cudnn_graphs)
  set_tests_properties(test_cudnn_graphs PROPERTIES TIMEOUT 120 LABELS "cuda;unit")
endif()

# check.sh's compare group (compare.sh) on the CPU: a tiny BERT, 3 s per attention type on one
# book of ../shared/data, the result lines, the table and report.py's fields (~20 s on 2 cores).
add_test(NAME test_gpu_compare_cpu COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_compare_cpu.sh)
set_tests_properties(test_gpu_compare_cpu PROPERTIES
  ENVIRONMENT "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2"
  TIMEOUT 180 LABELS e2e)

# The mhetrain-vs-PyTorch benchmark script runs end to end on shrunken models (no timing asserts).
add_test(NAME bench_vs_torch_smoke COMMAND sh ${CMAKE_SOURCE_DIR}/tests/bench/smoke.sh)
set_tests_properties(bench_vs_torch_smoke PROPERTIES TIMEOUT 300 LABELS bench ENVIRONMENT
    "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST bench_vs_torch_smoke APPEND PROPERTY LABELS e2e)
# The CPU attention core alone (fused vs reference, and the matmul ceiling): bench_attention;
# the smoke runs its shrunken shapes (no timing asserts).
add_executable(bench_attention ${CMAKE_SOURCE_DIR}/tests/bench/bench_attention.c)
target_link_libraries(bench_attention PRIVATE mhecore)
add_test(NAME bench_attention_smoke COMMAND bench_attention --quick --rounds 1)
set_tests_properties(bench_attention_smoke PROPERTIES TIMEOUT 120 LABELS "bench;e2e" ENVIRONMENT "OMP_NUM_THREADS=2")
# The weight-gradient products (fp32 dW = dYᵀ X) of the bench's sizes, plain oneDNN against the
# backend's default (issue 49: the K-chunked path at oneDNN's AVX2 level); built, not run by ctest.
add_executable(bench_weight_grads ${CMAKE_SOURCE_DIR}/tests/bench/bench_weight_grads.c)
target_link_libraries(bench_weight_grads PRIVATE mhecore)

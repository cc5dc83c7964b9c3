# The model against the PyTorch oracle (every arch x attention type), fast paths against plain
# paths, gradients against double-precision finite differences of the oracle's loss.
mhe_add_cmocka_test(model_matches_pytorch ${CMAKE_SOURCE_DIR}/tests/model/test_model.c)
set_tests_properties(model_matches_pytorch PROPERTIES TIMEOUT 300 LABELS model)
# Gradient accumulation, dropout masks shared by forward and backward, dropout statistics.
mhe_add_cmocka_test(model_training_properties ${CMAKE_SOURCE_DIR}/tests/model/test_model_train.c)
set_tests_properties(model_training_properties PROPERTIES TIMEOUT 120 LABELS model)
# CPU backend ops against naive double loops (matmul transposes/strides/split, batched, optimizer).
mhe_add_cmocka_test(cpu_ops_match_naive ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_ops.c)
set_tests_properties(cpu_ops_match_naive PROPERTIES TIMEOUT 60 LABELS model)
# mhetrain bench prints every figure for mha, mhe_add, mhe_mul; bad arguments exit 2.
add_test(NAME model_bench_smoke COMMAND sh ${CMAKE_SOURCE_DIR}/tests/model/bench_smoke.sh)
set_tests_properties(model_bench_smoke PROPERTIES TIMEOUT 120 LABELS model ENVIRONMENT
  "MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR};MHETRAIN=$<TARGET_FILE:mhetrain>;OMP_NUM_THREADS=2")
# Tiers (tests/README.md): unit, oracle, e2e, cuda, dist.
set_property(TEST model_matches_pytorch APPEND PROPERTY LABELS unit oracle)
set_property(TEST model_training_properties cpu_ops_match_naive model_bench_smoke
  APPEND PROPERTY LABELS unit)
# The transposed-A products in K chunks (cpu_gemm.c tn_wins): forced for every such product, and
# at oneDNN's AVX2 level, where the shape rule takes the chunked test's shapes.
add_test(NAME cpu_ops_match_naive_tn COMMAND cpu_ops_match_naive)
set_tests_properties(cpu_ops_match_naive_tn PROPERTIES TIMEOUT 120 LABELS "model;unit" ENVIRONMENT
  "MHE_CPU_GEMM_TN=1;OMP_NUM_THREADS=2")
add_test(NAME cpu_ops_match_naive_onednn_avx2 COMMAND cpu_ops_match_naive)
set_tests_properties(cpu_ops_match_naive_onednn_avx2 PROPERTIES TIMEOUT 120 LABELS "model;unit" ENVIRONMENT
  "ONEDNN_MAX_CPU_ISA=AVX2;OMP_NUM_THREADS=2")
# bf16 mode op by op against fp32 and a rounded-operand double oracle (matmul, attention core);
# again with oneDNN limited to AVX2, where no bf16 kernel exists (the emulated path).
mhe_add_cmocka_test(cpu_bf16_matches_fp32 ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_bf16.c)
set_tests_properties(cpu_bf16_matches_fp32 PROPERTIES TIMEOUT 300 LABELS model)
add_test(NAME cpu_bf16_emulated_matches_fp32 COMMAND cpu_bf16_matches_fp32)
set_tests_properties(cpu_bf16_emulated_matches_fp32 PROPERTIES TIMEOUT 300 LABELS model ENVIRONMENT
  "ONEDNN_MAX_CPU_ISA=AVX2;OMP_NUM_THREADS=2")
# And at oneDNN's AVX-512 level without bf16 instructions, where oneDNN has an emulating bf16
# kernel that the backend passes over for the fp32 primitive (cpu_gemm.c).
add_test(NAME cpu_bf16_avx512core_matches_fp32 COMMAND cpu_bf16_matches_fp32)
set_tests_properties(cpu_bf16_avx512core_matches_fp32 PROPERTIES TIMEOUT 300 LABELS model ENVIRONMENT
  "ONEDNN_MAX_CPU_ISA=AVX512_CORE;OMP_NUM_THREADS=2")
set_property(TEST cpu_bf16_matches_fp32 cpu_bf16_emulated_matches_fp32 cpu_bf16_avx512core_matches_fp32
  APPEND PROPERTY LABELS unit)
# Every activation op in bf16 storage (Backend.act = DT_BF16) against the fp32 backend on inputs
# exact in bf16, and upload_act/download_act's rounding.
mhe_add_cmocka_test(cpu_bf16_ops_match_fp32 ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_bf16_ops.c)
set_tests_properties(cpu_bf16_ops_match_fp32 PROPERTIES TIMEOUT 300 LABELS "model;unit")
# The same without a bf16 kernel (oneDNN limited to AVX2): bf16 results through the fp32 primitive.
add_test(NAME cpu_bf16_ops_emulated_match_fp32 COMMAND cpu_bf16_ops_match_fp32)
set_tests_properties(cpu_bf16_ops_emulated_match_fp32 PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "ONEDNN_MAX_CPU_ISA=AVX2;OMP_NUM_THREADS=2")
# bf16 weight copies kept for a training step (ops.h weights_steady) against rounding per call:
# training steps bit for bit (accumulation, an upload, a resume), no reuse outside a window.
mhe_add_cmocka_test(cpu_weight_cache_matches_per_call ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_weight_cache.c)
set_tests_properties(cpu_weight_cache_matches_per_call PROPERTIES TIMEOUT 300 LABELS "model;unit")
# The fine-tuning heads (issue 14) against tests/reference/ref_task.py: every attention type x
# bert/gpt x classification/regression/span, loss, outputs and every gradient; divisor semantics.
mhe_add_cmocka_test(task_heads_match_pytorch ${CMAKE_SOURCE_DIR}/tests/model/test_task_heads.c)
set_tests_properties(task_heads_match_pytorch PROPERTIES TIMEOUT 300 LABELS "model;unit;oracle")
# train.recompute attention / layer = none bit for bit (losses, logits, gradients, task heads) with
# dropout on, CPU fp32 (every attention type) and bf16; the arena shrinks by the shared buffers.
mhe_add_cmocka_test(recompute_is_bit_identical ${CMAKE_SOURCE_DIR}/tests/model/test_recompute.c)
set_tests_properties(recompute_is_bit_identical PROPERTIES TIMEOUT 300 LABELS "model;unit")
# MHE_CPU_WEIGHT_CHECK: every reused bf16 weight copy compared with a fresh rounding (aborts if
# stale) through the recomputed layers and the task heads.
add_test(NAME recompute_is_bit_identical_bf16 COMMAND recompute_is_bit_identical cpu_bf16)
set_tests_properties(recompute_is_bit_identical_bf16 PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "OMP_NUM_THREADS=2;MHE_CPU_WEIGHT_CHECK=1")
# The fused attention core against the reference core (MHE_CPU_ATTENTION=ref), fp32 and bf16,
# every AttnShape feature; again with 16-row query blocks on 3 threads (many blocks per
# sequence, three threads handing over each sequence's dk/dv sums); and with oneDNN limited to
# AVX2 (no bf16 kernel: the emulated products).
mhe_add_cmocka_test(cpu_attention_fused_matches_ref ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_attention.c)
set_tests_properties(cpu_attention_fused_matches_ref PROPERTIES TIMEOUT 300 LABELS "model;unit")
add_test(NAME cpu_attention_fused_matches_ref_block16 COMMAND cpu_attention_fused_matches_ref)
set_tests_properties(cpu_attention_fused_matches_ref_block16 PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "MHE_CPU_ATTN_BLOCK=16;OMP_NUM_THREADS=3")
add_test(NAME cpu_attention_fused_matches_ref_emulated COMMAND cpu_attention_fused_matches_ref)
set_tests_properties(cpu_attention_fused_matches_ref_emulated PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "ONEDNN_MAX_CPU_ISA=AVX2;OMP_NUM_THREADS=2")
# With the AMX products off (MHE_CPU_AMX=0: oneDNN's, as on a CPU without AMX), and with AMX on
# 32-row query blocks on 3 threads (many blocks, three threads handing over dK^T, dV^T sums).
add_test(NAME cpu_attention_fused_matches_ref_noamx COMMAND cpu_attention_fused_matches_ref)
set_tests_properties(cpu_attention_fused_matches_ref_noamx PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "MHE_CPU_AMX=0;OMP_NUM_THREADS=2")
add_test(NAME cpu_attention_fused_matches_ref_block32 COMMAND cpu_attention_fused_matches_ref)
set_tests_properties(cpu_attention_fused_matches_ref_block32 PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
  "MHE_CPU_ATTN_BLOCK=32;OMP_NUM_THREADS=3")
# The AMX tile products against a double loop (skipped without AMX).
mhe_add_cmocka_test(cpu_amx_products_match_naive ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_amx.c)
set_tests_properties(cpu_amx_products_match_naive PROPERTIES TIMEOUT 120 LABELS "model;unit")
# The CPU backend's host memory: alignment, zeroing, huge pages where THP gives them.
mhe_add_cmocka_test(cpu_host_memory ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_memory.c)
set_tests_properties(cpu_host_memory PROPERTIES TIMEOUT 60 LABELS "model;unit")
# The CPU backend's ISA levels (kernels/cpu/cpu_isa.h): every dispatched op at each level this
# CPU supports against the default (fastest) level, fp32 and bf16, both attention cores.
mhe_add_cmocka_test(cpu_isa_levels_match ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_isa.c)
set_tests_properties(cpu_isa_levels_match PROPERTIES TIMEOUT 300 LABELS "model;unit")
# The CPU's fused residual ops (residual_layernorm_forward, layernorm_backward_dropout) against
# the unfused op sequences, bit for bit, fp32 and bf16.
mhe_add_cmocka_test(cpu_fused_match_unfused ${CMAKE_SOURCE_DIR}/tests/model/test_cpu_fused.c)
set_tests_properties(cpu_fused_match_unfused PROPERTIES TIMEOUT 120 LABELS "model;unit")
# The CPU op tests again with the element code forced to the avx2 level (what an AVX2-only
# x86-64 runs) and to the baseline (x86-64-v2, no FMA: fmaf is a library call there).
foreach(isa avx2 baseline)
  foreach(t cpu_ops_match_naive cpu_bf16_ops_match_fp32 cpu_attention_fused_matches_ref cpu_fused_match_unfused)
    add_test(NAME ${t}_${isa} COMMAND ${t})
    set_tests_properties(${t}_${isa} PROPERTIES TIMEOUT 300 LABELS "model;unit" ENVIRONMENT
      "MHE_CPU_ISA=${isa};OMP_NUM_THREADS=2;MHE_SOURCE_DIR=${CMAKE_SOURCE_DIR};MHE_BINARY_DIR=${CMAKE_BINARY_DIR}")
  endforeach()
endforeach()
# MFU on GPUs: the data sheets' dense peaks by device name and the capped arithmetic (no GPU needed).
mhe_add_cmocka_test(gpu_peak_table ${CMAKE_SOURCE_DIR}/tests/model/test_gpu_peak.c)
set_tests_properties(gpu_peak_table PROPERTIES TIMEOUT 30 LABELS "model;unit")

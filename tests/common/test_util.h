// Fixtures shared by the C tests: small model configs, norm-wise and max-wise relative errors,
// and the CPU-backend group setup/teardown for cmocka.  Linked as mhe_testutil.
#ifndef MHE_TESTS_TEST_UTIL_H
#define MHE_TESTS_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trainer/config/config.h"
#include "trainer/model/params.h"

// The shape of a test model; every field is what config.h calls it.
typedef struct {
    int layers, hidden, heads, head_dim, ffn, vocab_size, max_seq;
    float init_std;
} TinyShape;

// The model of the oracle tests: 2 layers, D = 12, n = 4 (d = D/n), FFN 20, V = 17, 9 positions,
// weights N(0, 0.2²) so that a few layers still move the logits.
#define TINY_SHAPE ((TinyShape){2, 12, 4, 0, 20, 17, 9, 0.2f})

// config_defaults, then arch, attention type and shape, with data.seq_len 0 (= max_seq), and
// the type's own keys at their test values (attention_test_keys).
// Not resolved: callers set what else they need and call config_resolve.
void tiny_config(Config *cfg, Arch arch, AttentionType type, TinyShape shape);

// Sets the keys of cfg's attention type to the registry's test values (gqa: groups 2, mla:
// latent_dim 5, ...), so that every registered type makes a valid small model.
void attention_test_keys(Config *cfg);

// One model per (arch, registered attention type, path): the C tests' sweep over the registry.
// A type whose fast path changes its plan gets a "_fast" and a "_plain" case.
typedef struct {
    char name[64];       // e.g. "gpt_mla", "bert_mhe_add_plain"
    Arch arch;
    AttentionType type;
    int fast;            // attention.fast_path
} VariantCase;
#define MAX_VARIANT_CASES (4 * ATTN_TYPE_COUNT)
// Fills out[MAX_VARIANT_CASES] (bert first, registry order); returns how many.
int variant_cases(VariantCase *out);
// Does attention.fast_path change how type t runs?
int attention_has_fast_path(AttentionType t);

// The oracle's JSON members for the attention type: "attention": "<name>" then each integer key
// of the type's spec as "<key>": value (tests/reference/ref_model.py reads them by name).
void oracle_attention_json(FILE *f, const Config *cfg);

// ‖a − ref‖₂ / ‖ref‖₂ in double precision (‖a − ref‖₂ when ref is all zeros).
double rel_l2(const float *a, const float *ref, size_t n);

// ‖a − ref‖₂ / ‖ref‖₂, or the absolute ‖a − ref‖₂ when ‖ref‖₂ < 1e-6 (tensors that are zero
// up to rounding, where a relative error means nothing); *is_abs says which it returned.
double rel_l2_or_abs(const float *a, const float *ref, size_t n, int *is_abs);

// max|a − ref| / max|ref| (max|a − ref| when ref is all zeros).
double rel_max(const float *a, const float *ref, size_t n);

// Every tensor of t random (stream `stream` of `seed`, one substream per tensor), biases and
// LayerNorm included, so a misplaced or transposed tensor anywhere changes the outputs:
// weights N(0, 0.15²), biases N(0, 0.1²), LayerNorm gains N(1, 0.2²) and shifts N(0, 0.1²),
// head embeddings N(0, 0.5²) (collab mixing vectors N(1, 0.5²)).
void test_fill_params(const ParamTable *t, float *p, uint64_t seed, uint64_t stream);

// cmocka group setup/teardown: *state is a CPU backend with the OpenMP default thread count.
int cpu_backend_setup(void **state);
int cpu_backend_teardown(void **state);

#endif

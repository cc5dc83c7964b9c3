// Re-parametrizing a trained multi-head attention model into another attention type
// (issue 15; the collaborative-attention paper's §4 and Ainslie et al.'s GQA "uptraining").
//
//   mha -> collab (D~):  per layer, the heads' bilinear forms T[:, h, :] = W_Q^(h) W_K^(h)ᵀ
//                        (D × n × D, W^(h) the D × d input-to-head maps) are decomposed by
//                        CP/PARAFAC of rank D~ with alternating least squares:
//                        T ≈ Σ_r W~_Q[:, r] ∘ m[:, r] ∘ W~_K[:, r].  W~_Q, W~_K become the shared
//                        query/key maps (their biases 0), m the mixing vectors.  The query bias
//                        becomes the content bias W_cb[h, :] = s · W_K^(h) b_Q^(h) (s = 1/sqrt(d),
//                        because mhetrain adds the content bias after scaling); the key bias only
//                        shifts a query's scores by a constant and drops out of the softmax.
//                        Values and the output projection are copied.  The score scale s stays
//                        the original 1/sqrt(d): model.head_dim is kept.  With D~ = n·d the exact
//                        "concatenate" layout is used (W~_Q = W_Q, W~_K = W_K, m = block
//                        indicators): no ALS, outputs unchanged up to rounding.
//   mha -> gqa (g) / mqa: K and V heads mean-pooled within contiguous groups of n/g heads
//                        (query head h reads group h / (n/g), as the attention kernels do).
//
// ALS: factors initialised from the leading eigenvectors of each unfolding's Gram matrix
// (the SVD initialisation; columns beyond the unfolding's rank drawn N(0,1) from `seed`),
// normal equations solved by LAPACK dposv (Cholesky) in double precision, stopped when the
// relative reconstruction error improves by less than `tol` or after `max_iter` sweeps.
#ifndef MHE_TRAINER_CONVERT_H
#define MHE_TRAINER_CONVERT_H

#include <stdint.h>

#include "trainer/model/params.h"

typedef struct {
    AttentionType to;   // ATTN_COLLAB, ATTN_GQA or ATTN_MQA
    int collab_dim;     // collab: D~
    int groups;         // gqa: number of K/V heads
    uint64_t seed;      // ALS random columns
    double tol;         // ALS: stop when the relative error improves by less
    int max_iter;       // ALS: sweep cap
} ConvertOptions;

typedef struct {
    double rel_error;   // ‖T − T^‖_F / ‖T‖_F (collab; 0 for gqa/mqa)
    int iterations;     // ALS sweeps (0: exact layout or not collab)
    double seconds;
} ConvertLayerReport;

// Turns `cfg` (a loaded copy of the source's config, which must be mha) into the target's:
// attention fields from `o`, resolved.  Errors (source not mha, groups not dividing n, D~ out
// of 1..n·d) exit 2 naming `where`.
void convert_config(Config *cfg, const ConvertOptions *o, const char *where);

// Fills dst_params (laid out by dst_t, built from dst_cfg) from the mha model (src_t,
// src_params).  reports: one per layer (may be NULL).
void convert_params(const Config *src_cfg, const ParamTable *src_t, const float *src_params,
                    const Config *dst_cfg, const ParamTable *dst_t, float *dst_params,
                    const ConvertOptions *o, ConvertLayerReport *reports);

// CP-ALS of the tensor given implicitly by its slices T[:, h, :] = Q_hᵀ K_h (Q_h, K_h: d × D,
// row-major, heads stacked: Q is [n·d, D]).  Outputs A [D, R], B [n, R], C [D, R] row-major.
// Returns the relative reconstruction error; *iters the sweeps used.  Exposed for tests.
double convert_cp_als(const float *Q, const float *K, int n, int d, int D, int R, const ConvertOptions *o,
                      double *A, double *B, double *C, int *iters);

#endif

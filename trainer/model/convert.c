// mha -> collab / gqa / mqa re-parametrization (see convert.h for the math).
#include "trainer/model/convert.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"

// LAPACK (Fortran interface; Debian liblapack-dev).
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda, double *b,
                   const int *ldb, int *info);
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                   double *work, const int *lwork, int *info);

void convert_config(Config *cfg, const ConvertOptions *o, const char *where) {
    const int n = cfg->model.heads, d = cfg->model.head_dim;
    if (cfg->attention.type != ATTN_MHA)
        mhe_fail("convert: %s: attention.type is %s; conversion starts from a trained mha model", where,
                 attention_type_name(cfg->attention.type));
    switch (o->to) {
    case ATTN_COLLAB:
        if (o->collab_dim < 1 || o->collab_dim > n * d)
            mhe_fail("convert: --collab-dim must be in 1..n*d = %d for %s, got %d", n * d, where, o->collab_dim);
        cfg->attention.collab_dim = o->collab_dim;
        break;
    case ATTN_GQA:
        if (o->groups < 1 || n % o->groups != 0)
            mhe_fail("convert: --groups must divide the %d heads of %s, got %d", n, where, o->groups);
        cfg->attention.groups = o->groups;
        break;
    case ATTN_MQA: break;
    default: mhe_fail("convert: target attention type %s is not supported", attention_type_name(o->to));
    }
    cfg->attention.type = o->to;
    config_resolve(cfg, where);
}

// X [m, R] := M [m, R] G^{-1}, G [R, R] symmetric positive (semi)definite.  A tiny ridge is
// added only when Cholesky fails (rank-deficient factors), growing until it succeeds.
static void solve_right(const double *G, double *M, int m, int R) {
    double *Gc = mhe_malloc((size_t)R * R * sizeof(double));
    double *Mc = mhe_malloc((size_t)m * R * sizeof(double));
    double maxdiag = 0;
    for (int r = 0; r < R; r++) maxdiag = fmax(maxdiag, G[(size_t)r * R + r]);
    double ridge = 0;
    for (int attempt = 0; attempt < 12; attempt++) {
        memcpy(Gc, G, (size_t)R * R * sizeof(double));
        memcpy(Mc, M, (size_t)m * R * sizeof(double));
        for (int r = 0; r < R; r++) Gc[(size_t)r * R + r] += ridge;
        int info = 0;
        // Row-major M [m, R] is column-major Mᵀ [R, m]: G Xᵀ = Mᵀ.
        dposv_("U", &R, &m, Gc, &R, Mc, &R, &info);
        if (info == 0) {
            memcpy(M, Mc, (size_t)m * R * sizeof(double));
            free(Gc);
            free(Mc);
            return;
        }
        if (info < 0) mhe_fatal("convert: dposv argument %d invalid", -info);
        ridge = ridge == 0 ? 1e-12 * (maxdiag > 0 ? maxdiag : 1) : ridge * 100;
    }
    mhe_fatal("convert: ALS normal equations stay singular (all-zero attention weights?)");
}

// G = XᵀX for X [m, R].
static void gram(const double *X, int m, int R, double *G) {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, R, m, 1.0, X, R, X, R, 0.0, G, R);
}

static void hadamard(const double *X, const double *Y, double *Z, size_t n) {
    for (size_t i = 0; i < n; i++) Z[i] = X[i] * Y[i];
}

// out [m, R]: the leading eigenvectors of S [m, m] (symmetric), descending, as columns;
// columns beyond m drawn N(0, 1) from `seed`.  The SVD initialisation of CP-ALS.
static void leading_eigvecs(double *S, int m, int R, double *out, uint64_t seed, int mode) {
    double *w = mhe_malloc((size_t)m * sizeof(double)), q;
    int lwork = -1, info = 0;
    dsyev_("V", "U", &m, S, &m, w, &q, &lwork, &info);
    lwork = (int)q;
    double *work = mhe_malloc((size_t)lwork * sizeof(double));
    dsyev_("V", "U", &m, S, &m, w, work, &lwork, &info);
    if (info != 0) mhe_fatal("convert: dsyev failed (%d)", info);
    // Column-major eigenvectors: eigenvector j (ascending) is S[j*m .. j*m+m-1].
    Rng rng = rng_stream(seed, 0xC0, (uint64_t)mode);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++)
            out[(size_t)i * R + r] = r < m ? S[(size_t)(m - 1 - r) * m + i] : rng_next_normal(&rng);
    free(work);
    free(w);
}

double convert_cp_als(const float *Qf, const float *Kf, int n, int d, int D, int R, const ConvertOptions *o,
                      double *A, double *B, double *C, int *iters) {
    const size_t hd = (size_t)d * D;
    double *Q = mhe_malloc((size_t)n * hd * sizeof(double)), *K = mhe_malloc((size_t)n * hd * sizeof(double));
    for (size_t i = 0; i < (size_t)n * hd; i++) Q[i] = Qf[i], K[i] = Kf[i];
    // Per-head Grams QQ_h = Q_h Q_hᵀ, KK_h = K_h K_hᵀ (d × d), for ‖T‖ and the initialisation.
    double *QQ = mhe_malloc((size_t)n * d * d * sizeof(double)), *KK = mhe_malloc((size_t)n * d * d * sizeof(double));
    for (int h = 0; h < n; h++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, d, D, 1.0, Q + h * hd, D, Q + h * hd, D, 0.0,
                    QQ + (size_t)h * d * d, d);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, d, D, 1.0, K + h * hd, D, K + h * hd, D, 0.0,
                    KK + (size_t)h * d * d, d);
    }
    double normT2 = 0;
    for (int h = 0; h < n; h++)
        for (size_t i = 0; i < (size_t)d * d; i++) normT2 += QQ[(size_t)h * d * d + i] * KK[(size_t)h * d * d + i];

    // Initialisation: Gram matrices of the three unfoldings.
    //   mode 1: Σ_h Q_hᵀ KK_h Q_h [D, D];  mode 3: Σ_h K_hᵀ QQ_h K_h;  mode 2: ⟨T_h, T_h'⟩ [n, n].
    double *S = mhe_calloc((size_t)D * D, sizeof(double)), *tmp = mhe_malloc((size_t)d * D * sizeof(double));
    for (int h = 0; h < n; h++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, D, d, 1.0, KK + (size_t)h * d * d, d, Q + h * hd, D,
                    0.0, tmp, D);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, d, 1.0, Q + h * hd, D, tmp, D, 1.0, S, D);
    }
    leading_eigvecs(S, D, R, A, o->seed, 1);
    memset(S, 0, (size_t)D * D * sizeof(double));
    for (int h = 0; h < n; h++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, D, d, 1.0, QQ + (size_t)h * d * d, d, K + h * hd, D,
                    0.0, tmp, D);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, d, 1.0, K + h * hd, D, tmp, D, 1.0, S, D);
    }
    leading_eigvecs(S, D, R, C, o->seed, 3);
    double *Sn = mhe_malloc((size_t)n * n * sizeof(double)), *qq = mhe_malloc((size_t)d * d * sizeof(double)),
           *kk = mhe_malloc((size_t)d * d * sizeof(double));
    for (int h = 0; h < n; h++)
        for (int g = 0; g < n; g++) {
            // ⟨Q_hᵀK_h, Q_gᵀK_g⟩ = Σ (Q_h Q_gᵀ) ∘ (K_h K_gᵀ)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, d, D, 1.0, Q + h * hd, D, Q + g * hd, D, 0.0, qq, d);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, d, D, 1.0, K + h * hd, D, K + g * hd, D, 0.0, kk, d);
            double s = 0;
            for (int i = 0; i < d * d; i++) s += qq[i] * kk[i];
            Sn[h * n + g] = s;
        }
    leading_eigvecs(Sn, n, R, B, o->seed, 2);
    free(Sn), free(qq), free(kk), free(S);

    const size_t dR = (size_t)d * R;
    double *QA = mhe_malloc((size_t)n * dR * sizeof(double)), *KC = mhe_malloc((size_t)n * dR * sizeof(double));
    double *W = mhe_malloc(dR * sizeof(double)), *M = mhe_malloc((size_t)D * R * sizeof(double));
    double *G1 = mhe_malloc((size_t)R * R * sizeof(double)), *G2 = mhe_malloc((size_t)R * R * sizeof(double));
    double *G = mhe_malloc((size_t)R * R * sizeof(double)), *MB = mhe_malloc((size_t)n * R * sizeof(double));
    const double normT = sqrt(normT2 > 0 ? normT2 : 1);
    double err = 1.0, prev = INFINITY;
    int it = 0;
    for (it = 1; it <= o->max_iter; it++) {
        // A = T_(1) (B ⊙ C) [(BᵀB) ∘ (CᵀC)]^{-1},  T_(1)(B⊙C)[a, r] = Σ_h B[h,r] (Q_hᵀ K_h C)[a, r].
        for (int h = 0; h < n; h++)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, R, D, 1.0, K + h * hd, D, C, R, 0.0, KC + h * dR, R);
        memset(M, 0, (size_t)D * R * sizeof(double));
        for (int h = 0; h < n; h++) {
            for (int c = 0; c < d; c++)
                for (int r = 0; r < R; r++) W[(size_t)c * R + r] = KC[h * dR + (size_t)c * R + r] * B[(size_t)h * R + r];
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, R, d, 1.0, Q + h * hd, D, W, R, 1.0, M, R);
        }
        gram(B, n, R, G1), gram(C, D, R, G2), hadamard(G1, G2, G, (size_t)R * R);
        solve_right(G, M, D, R);
        memcpy(A, M, (size_t)D * R * sizeof(double));
        // B[h, r] = Σ_c (Q_h A)[c, r] (K_h C)[c, r], then the same solve.
        for (int h = 0; h < n; h++)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, R, D, 1.0, Q + h * hd, D, A, R, 0.0, QA + h * dR, R);
        for (int h = 0; h < n; h++)
            for (int r = 0; r < R; r++) {
                double s = 0;
                for (int c = 0; c < d; c++) s += QA[h * dR + (size_t)c * R + r] * KC[h * dR + (size_t)c * R + r];
                MB[(size_t)h * R + r] = s;
            }
        gram(A, D, R, G1), hadamard(G1, G2, G, (size_t)R * R);
        solve_right(G, MB, n, R);
        memcpy(B, MB, (size_t)n * R * sizeof(double));
        // C[b, r] = Σ_h B[h,r] (K_hᵀ Q_h A)[b, r], then the solve.
        memset(M, 0, (size_t)D * R * sizeof(double));
        for (int h = 0; h < n; h++) {
            for (int c = 0; c < d; c++)
                for (int r = 0; r < R; r++) W[(size_t)c * R + r] = QA[h * dR + (size_t)c * R + r] * B[(size_t)h * R + r];
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, R, d, 1.0, K + h * hd, D, W, R, 1.0, M, R);
        }
        gram(B, n, R, G2), hadamard(G1, G2, G, (size_t)R * R);  // G1 = AᵀA still
        double *MC = mhe_malloc((size_t)D * R * sizeof(double));
        memcpy(MC, M, (size_t)D * R * sizeof(double));
        solve_right(G, M, D, R);
        memcpy(C, M, (size_t)D * R * sizeof(double));
        // ‖T − T^‖² = ‖T‖² − 2 Σ C ∘ MC + Σ G ∘ CᵀC  (MC = T_(3)(A ⊙ B) before the solve).
        double inner = 0, model2 = 0;
        for (size_t i = 0; i < (size_t)D * R; i++) inner += C[i] * MC[i];
        free(MC);
        gram(C, D, R, G1);
        for (size_t i = 0; i < (size_t)R * R; i++) model2 += G[i] * G1[i];
        err = sqrt(fmax(normT2 - 2 * inner + model2, 0.0)) / normT;
        if (prev - err < o->tol) break;
        prev = err;
    }
    *iters = it > o->max_iter ? o->max_iter : it;
    free(QA), free(KC), free(W), free(M), free(G1), free(G2), free(G), free(MB);
    free(Q), free(K), free(QQ), free(KK), free(tmp);
    return err;
}

// ‖T − T^‖_F / ‖T‖_F for float factors, T formed explicitly (independent of the ALS bookkeeping).
static double explicit_error(const float *Q, const float *K, int n, int d, int D, int R, const float *Aq,
                             const float *Mix, const float *Ck) {
    double num = 0, den = 0;
    double *row = mhe_malloc((size_t)D * sizeof(double)), *wr = mhe_malloc((size_t)R * sizeof(double));
    for (int h = 0; h < n; h++)
        for (int a = 0; a < D; a++) {
            for (int b = 0; b < D; b++) row[b] = 0;
            for (int c = 0; c < d; c++) {
                const double q = Q[((size_t)h * d + c) * D + a];
                const float *k = K + ((size_t)h * d + c) * D;
                for (int b = 0; b < D; b++) row[b] += q * k[b];
            }
            // Aq, Ck are [R, D] (the q/k weights), Mix [n, R].
            for (int r = 0; r < R; r++) wr[r] = (double)Aq[(size_t)r * D + a] * Mix[(size_t)h * R + r];
            for (int b = 0; b < D; b++) {
                double s = 0;
                for (int r = 0; r < R; r++) s += wr[r] * Ck[(size_t)r * D + b];
                num += (row[b] - s) * (row[b] - s);
                den += row[b] * row[b];
            }
        }
    free(row), free(wr);
    return den > 0 ? sqrt(num / den) : 0.0;
}

static float *dst_at(const ParamTable *t, float *p, int l, const char *what) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "layers.%d.attn.%s", l, what);
    return p + param_offset(t, name);
}

static const float *src_at(const ParamTable *t, const float *p, int l, const char *what) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "layers.%d.attn.%s", l, what);
    return p + param_offset(t, name);
}

static void collab_layer(const Config *sc, const ParamTable *st, const float *sp, const Config *dc,
                         const ParamTable *dt, float *dp, int l, const ConvertOptions *o, ConvertLayerReport *rep) {
    const int D = sc->model.hidden, n = sc->model.heads, d = sc->model.head_dim, R = dc->attention.collab_dim;
    const float *Wq = src_at(st, sp, l, "q.weight"), *bq = src_at(st, sp, l, "q.bias");
    const float *Wk = src_at(st, sp, l, "k.weight");
    float *q = dst_at(dt, dp, l, "q.weight"), *k = dst_at(dt, dp, l, "k.weight"), *mix = dst_at(dt, dp, l, "mix");
    memset(dst_at(dt, dp, l, "q.bias"), 0, (size_t)R * sizeof(float));
    memset(dst_at(dt, dp, l, "k.bias"), 0, (size_t)R * sizeof(float));
    rep->iterations = 0;
    if (R == n * d) {
        // Concatenate layout: head h owns coordinates h·d .. h·d+d−1 of the shared space.
        memcpy(q, Wq, (size_t)R * D * sizeof(float));
        memcpy(k, Wk, (size_t)R * D * sizeof(float));
        for (int h = 0; h < n; h++)
            for (int r = 0; r < R; r++) mix[(size_t)h * R + r] = r / d == h ? 1.0f : 0.0f;
    } else {
        double *A = mhe_malloc((size_t)D * R * sizeof(double)), *B = mhe_malloc((size_t)n * R * sizeof(double));
        double *C = mhe_malloc((size_t)D * R * sizeof(double));
        convert_cp_als(Wq, Wk, n, d, D, R, o, A, B, C, &rep->iterations);
        // Balance each rank-one term: mixing column norm sqrt(n) (entries near ±1, like a fresh
        // collab model's), the rest split evenly between the query and key maps.
        for (int r = 0; r < R; r++) {
            double na = 0, nb = 0, nc = 0;
            for (int i = 0; i < D; i++) na += A[(size_t)i * R + r] * A[(size_t)i * R + r], nc += C[(size_t)i * R + r] * C[(size_t)i * R + r];
            for (int h = 0; h < n; h++) nb += B[(size_t)h * R + r] * B[(size_t)h * R + r];
            na = sqrt(na), nb = sqrt(nb), nc = sqrt(nc);
            const double lam = na * nb * nc;
            const double sb = nb > 0 ? sqrt((double)n) / nb : 0;
            const double side = lam > 0 ? sqrt(lam / sqrt((double)n)) : 0;
            const double sa = na > 0 ? side / na : 0, sc_ = nc > 0 ? side / nc : 0;
            for (int i = 0; i < D; i++) {
                q[(size_t)r * D + i] = (float)(A[(size_t)i * R + r] * sa);
                k[(size_t)r * D + i] = (float)(C[(size_t)i * R + r] * sc_);
            }
            for (int h = 0; h < n; h++) mix[(size_t)h * R + r] = (float)(B[(size_t)h * R + r] * sb);
        }
        free(A), free(B), free(C);
    }
    rep->rel_error = explicit_error(Wq, Wk, n, d, D, R, q, mix, k);
    // Content bias: the score term s · b_Q^(h) · (K_h x) that depends on the key; mhetrain adds
    // X W_cbᵀ after the 1/sqrt(d) scaling, so the scale goes into W_cb.
    const double s = 1.0 / sqrt((double)d);
    float *cb = dst_at(dt, dp, l, "content_bias");
    for (int h = 0; h < n; h++)
        for (int b = 0; b < D; b++) {
            double acc = 0;
            for (int c = 0; c < d; c++) acc += (double)bq[h * d + c] * Wk[((size_t)h * d + c) * D + b];
            cb[(size_t)h * D + b] = (float)(s * acc);
        }
}

// K or V heads of [n·d, D] (and bias [n·d]) averaged over contiguous groups of n/g heads.
static void pool_heads(const float *src, float *dst, int n, int g, int d, int cols) {
    const int per = n / g, width = cols > 0 ? cols : 1;
    for (int j = 0; j < g; j++)
        for (int c = 0; c < d; c++)
            for (int i = 0; i < width; i++) {
                double s = 0;
                for (int h = j * per; h < (j + 1) * per; h++) s += src[((size_t)h * d + c) * width + i];
                dst[((size_t)j * d + c) * width + i] = (float)(s / per);
            }
}

void convert_params(const Config *sc, const ParamTable *st, const float *sp, const Config *dc, const ParamTable *dt,
                    float *dp, const ConvertOptions *o, ConvertLayerReport *reports) {
    // Everything with the same name and shape in both tables is copied: embeddings, norms,
    // FFN, head, and in attention the projections the target keeps (q for gqa, v and o).
    for (int i = 0; i < dt->count; i++) {
        const ParamTensor *p = &dt->tensors[i];
        const ParamTensor *s = param_table_find(st, p->name);
        if (s && s->numel == p->numel && s->shape[0] == p->shape[0] && s->shape[1] == p->shape[1])
            memcpy(dp + p->offset, sp + s->offset, p->numel * sizeof(float));
    }
    const int n = sc->model.heads, d = sc->model.head_dim, D = sc->model.hidden;
    for (int l = 0; l < sc->model.layers; l++) {
        ConvertLayerReport rep = {0};
        const double t0 = mhe_now_s();
        if (dc->attention.type == ATTN_COLLAB) {
            collab_layer(sc, st, sp, dc, dt, dp, l, o, &rep);
        } else {
            const int g = dc->attention.type == ATTN_MQA ? 1 : dc->attention.groups;
            pool_heads(src_at(st, sp, l, "k.weight"), dst_at(dt, dp, l, "k.weight"), n, g, d, D);
            pool_heads(src_at(st, sp, l, "k.bias"), dst_at(dt, dp, l, "k.bias"), n, g, d, 0);
            pool_heads(src_at(st, sp, l, "v.weight"), dst_at(dt, dp, l, "v.weight"), n, g, d, D);
            pool_heads(src_at(st, sp, l, "v.bias"), dst_at(dt, dp, l, "v.bias"), n, g, d, 0);
        }
        rep.seconds = mhe_now_s() - t0;
        if (reports) reports[l] = rep;
    }
}

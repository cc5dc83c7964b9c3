// The attention core (ops.h AttnShape) on the CPU: per (batch, head) oneDNN products for scores
// and weighted sums (bf16 operands in bf16 mode, fp32 softmax and statistics); only the row log-sum-exp is saved, the backward recomputes the scores.
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

typedef struct {
    const float *q, *k, *v;  // head slices at row 0 of sequence b
} HeadPtrs;

static HeadPtrs head_ptrs(const AttnShape *s, const float *q, const float *k, const float *v,
                          int b, int h) {
    int n = s->n_heads;
    HeadPtrs p;
    p.q = q + (size_t)b * s->T * s->ldq + (size_t)(h / (n / s->q_heads)) * s->qk_dim;
    p.k = k + (size_t)b * s->T * s->ldk + (size_t)(h / (n / s->k_heads)) * s->qk_dim;
    p.v = v + (size_t)b * s->T * s->ldv + (size_t)(h / (n / s->v_heads)) * s->v_dim;
    return p;
}

static int shares_scores(const AttnShape *s) { return s->q_heads == 1 && s->k_heads == 1 && s->n_heads > 1; }

static void scores(const Backend *be, const AttnShape *s, const HeadPtrs *p, float *S) {
    cpu_gemm_be(be, 0, 1, s->T, s->T, s->qk_dim, s->scale, p->q,
                s->ldq, p->k, s->ldk, 0.0f, S, s->T);
}

// S = raw scores of (b, h) (a copy of R when heads share them) plus the per-key bias.
static void head_scores(const Backend *be, const AttnShape *s, const HeadPtrs *p, int b, int h, const float *R, float *S) {
    const int T = s->T, n = s->n_heads;
    const size_t TT = (size_t)T * T;
    if (R)
        memcpy(S, R, TT * sizeof *S);
    else
        scores(be, s, p, S);
    if (s->key_bias) {
        const float *kb = s->key_bias + (size_t)b * T * n + h;
        for (int i = 0; i < T; i++) {
            float *row = S + (size_t)i * T;
            for (int j = 0; j < T; j++) row[j] += kb[(size_t)j * n];
        }
    }
}

// Keys visible to query row i: j < row_end (causal) and key_mask[j] != 0 (km may be NULL).
static int row_end(const AttnShape *s, int i) { return s->causal ? i + 1 : s->T; }
static const int32_t *row_mask(const AttnShape *s, int b) {
    return s->key_mask ? s->key_mask + (size_t)b * s->T : NULL;
}

// Masked row softmax in place; lse[i] = log Σ_visible exp(S[i, j]) (-inf: no visible key).
// With dropout the normalising pass also applies head h's mask, so S ends as the dropped
// probabilities P ⊙ keep / (1-p) without a second pass over T².
// Branch-free inner loops (masks as selects) so they vectorise, exp by cpu_expf.
static void softmax_rows(const AttnShape *s, int b, int h, float *S, float *lse) {
    const int T = s->T;
    const int32_t *km = row_mask(s, b);
    const int drop = s->dropout > 0.0f;
    const float keep_scale = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
    const uint64_t key = drop ? ops_dropout_key(s->seed, s->offset) : 0;
    const uint32_t thr = drop ? ops_dropout_threshold(s->dropout) : 0;
    const uint64_t base = ((uint64_t)b * s->n_heads + h) * (uint64_t)T * T;
    for (int i = 0; i < T; i++) {
        float *row = S + (size_t)i * T;
        const int je = row_end(s, i);
        float mx = -INFINITY;
        if (km) {
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) mx = km[j] && row[j] > mx ? row[j] : mx;
        } else {
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) mx = row[j] > mx ? row[j] : mx;
        }
        if (mx == -INFINITY) {
            memset(row, 0, (size_t)T * sizeof *row);
            lse[i] = -INFINITY;
            continue;
        }
        float sum = 0;
        if (km) {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                float e = km[j] ? cpu_expf(row[j] - mx) : 0.0f;
                row[j] = e;
                sum += e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                float e = cpu_expf(row[j] - mx);
                row[j] = e;
                sum += e;
            }
        }
        if (je < T) memset(row + je, 0, (size_t)(T - je) * sizeof *row);
        const float inv = 1.0f / sum;
        if (drop) {
            const uint64_t rb = base + (uint64_t)i * T;
#pragma omp simd
            for (int j = 0; j < je; j++)
                row[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * inv * keep_scale : 0.0f;
        } else {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] *= inv;
        }
        lse[i] = mx + logf(sum);
    }
}

// The backward's probabilities from the saved row log-sum-exp: P = exp(S - lse) where visible.
// With dropout, Pd (head h's dropped probabilities, as the forward used them) is written in
// the same pass.
static void probs_from_lse(const AttnShape *s, int b, int h, float *S, const float *lse, float *Pd) {
    const int T = s->T;
    const int32_t *km = row_mask(s, b);
    const int drop = s->dropout > 0.0f;
    const float keep_scale = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
    const uint64_t key = drop ? ops_dropout_key(s->seed, s->offset) : 0;
    const uint32_t thr = drop ? ops_dropout_threshold(s->dropout) : 0;
    const uint64_t base = ((uint64_t)b * s->n_heads + h) * (uint64_t)T * T;
    for (int i = 0; i < T; i++) {
        float *row = S + (size_t)i * T;
        const float l = lse[i];
        const int je = l > -INFINITY ? row_end(s, i) : 0;
        if (km) {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = km[j] ? cpu_expf(row[j] - l) : 0.0f;
        } else {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = cpu_expf(row[j] - l);
        }
        if (je < T) memset(row + je, 0, (size_t)(T - je) * sizeof *row);
        if (drop) {
            float *pd = Pd + (size_t)i * T;
            const uint64_t rb = base + (uint64_t)i * T;
#pragma omp simd
            for (int j = 0; j < T; j++) pd[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * keep_scale : 0.0f;
        }
    }
}

// Only the row log-sum-exp is saved ([B, n, T]): the backward recomputes the scores, so memory
// stays O(T) per head instead of O(T²).  Scratch is per thread.
#define FWD_TT 3
#define BWD_TT 5
static void cpu_attention_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t T = (size_t)s->T, nt = (size_t)cpu_threads(be);
    // Room for the unscaled P V too (the output scale's gradient needs it), whether or not
    // this shape has out_scale set: callers may size with a shape whose pointers are unset.
    *saved = (size_t)s->B * s->n_heads * T + (size_t)s->B * T * s->n_heads * s->v_dim;
    size_t fwd = nt * FWD_TT * T * T;
    size_t bwd = nt * (BWD_TT * T * T + T * s->v_dim + T);
    *scratch = fwd > bwd ? fwd : bwd;
}

static double attention_flops(const AttnShape *s) {
    return 2.0 * s->B * s->n_heads * (double)s->T * s->T * (s->qk_dim + s->v_dim);
}

// One head of one sequence: scores, softmax (lse saved), dropout, P V, output scale/shift.
static void forward_head(const Backend *be, const AttnShape *s, const float *q, const float *k, const float *v,
                         float *out, float *lse_all, int b, int h, const float *R, float *ws) {
    const int T = s->T, n = s->n_heads, dv = s->v_dim, ldo = n * dv;
    float *S = ws;
    HeadPtrs p = head_ptrs(s, q, k, v, b, h);
    head_scores(be, s, &p, b, h, R, S);
    softmax_rows(s, b, h, S, lse_all + ((size_t)b * n + h) * T);
    const float *Pd = S;  // already dropped
    float *o = out + (size_t)b * T * ldo + (size_t)h * dv;
    cpu_gemm_be(be, 0, 0, T, dv, T, 1.0f, Pd, T, p.v, s->ldv, 0.0f, o, ldo);
    if (s->out_scale) {
        // Saved after the row log-sum-exps: d out_scale = Σ_rows dO ⊙ (P V).
        float *pv = lse_all + (size_t)s->B * n * T + (size_t)b * T * ldo + (size_t)h * dv;
        for (int i = 0; i < T; i++) memcpy(pv + (size_t)i * ldo, o + (size_t)i * ldo, (size_t)dv * sizeof *pv);
    }
    if (s->out_scale || s->out_shift) {
        const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
        const float *sh = s->out_shift ? s->out_shift + (size_t)h * dv : NULL;
        for (int i = 0; i < T; i++) {
            float *r = o + (size_t)i * ldo;
            for (int c = 0; c < dv; c++) r[c] = (sc ? r[c] * sc[c] : r[c]) + (sh ? sh[c] : 0.0f);
        }
    }
}

static void cpu_attention_forward(Backend *be, const AttnShape *s, const float *q,
                                  const float *k, const float *v, float *out, float *saved,
                                  float *scratch) {
    double t0 = cpu_prof_begin(be);
    const int B = s->B, n = s->n_heads;
    const size_t TT = (size_t)s->T * s->T;
    if (shares_scores(s)) {
        // sha / mhe_add: every head has the same raw scores, one product per sequence.
#pragma omp parallel for schedule(dynamic) num_threads(cpu_threads(be)) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int b = 0; b < B; b++) {
            float *ws = scratch + (size_t)omp_get_thread_num() * FWD_TT * TT, *R = ws + 2 * TT;
            HeadPtrs p = head_ptrs(s, q, k, v, b, 0);
            scores(be, s, &p, R);
            for (int h = 0; h < n; h++) forward_head(be, s, q, k, v, out, saved, b, h, R, ws);
        }
    } else {
#pragma omp parallel for schedule(dynamic) num_threads(cpu_threads(be)) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int bh = 0; bh < B * n; bh++)
            forward_head(be, s, q, k, v, out, saved, bh / n, bh % n, NULL,
                         scratch + (size_t)omp_get_thread_num() * FWD_TT * TT);
    }
    cpu_prof_end(be, OPC_ATTENTION, t0, attention_flops(s));
}

static void zero_cols(float *x, int rows, int ld, int cols) {
    for (int r = 0; r < rows; r++) memset(x + (size_t)r * ld, 0, (size_t)cols * sizeof *x);
}

// Per (b, h), with G = dO ⊙ scale and Pd the dropped probabilities:
//   dV += Pdᵀ G;  dP = (G Vᵀ) ⊙ keep/(1-p);  dS = P ⊙ (dP - rowsum(P ⊙ dP));
//   dQ += scale dS K;  dK += scale dSᵀ Q;  dbias[j] = Σ_i dS[i, j].
// Sequences run in parallel; the heads of one sequence run in order because they may share
// the same K/V (or Q) rows.
static void cpu_attention_backward(Backend *be, const AttnShape *s, const float *q,
                                   const float *k, const float *v, const float *saved,
                                   const float *dout, float *dq, float *dk, float *dv_out,
                                   float *dkey_bias, float *dout_scale, float *dout_shift,
                                   float *scratch) {
    double t0 = cpu_prof_begin(be);
    const int B = s->B, T = s->T, n = s->n_heads, dv = s->v_dim, dk_ = s->qk_dim;
    const size_t TT = (size_t)T * T;
    const int ldo = n * dv;
    const size_t per_thread = BWD_TT * TT + (size_t)T * dv + T;
    const int shared = shares_scores(s);
    const float *pv_all = saved + (size_t)B * n * T;  // the forward's unscaled P V
#pragma omp parallel for schedule(dynamic) num_threads(cpu_threads(be)) if (attention_flops(s) >= CPU_PARALLEL_MIN)
    for (int b = 0; b < B; b++) {
        float *ws = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *Pdbuf = ws, *dP = ws + TT, *dS_sum = ws + 2 * TT, *R = ws + 3 * TT, *P = ws + 4 * TT;
        float *G = ws + BWD_TT * TT;
        if (shared) {
            memset(dS_sum, 0, TT * sizeof *dS_sum);
            HeadPtrs p0 = head_ptrs(s, q, k, v, b, 0);
            scores(be, s, &p0, R);
        }
        zero_cols(dq + (size_t)b * T * s->ldq, T, s->ldq, s->q_heads * dk_);
        zero_cols(dk + (size_t)b * T * s->ldk, T, s->ldk, s->k_heads * dk_);
        zero_cols(dv_out + (size_t)b * T * s->ldv, T, s->ldv, s->v_heads * dv);
        for (int h = 0; h < n; h++) {
            HeadPtrs p = head_ptrs(s, q, k, v, b, h);
            const size_t qoff = p.q - q, koff = p.k - k, voff = p.v - v;
            head_scores(be, s, &p, b, h, shared ? R : NULL, P);
            probs_from_lse(s, b, h, P, saved + ((size_t)b * n + h) * T, Pdbuf);
            const float *Pd = s->dropout > 0.0f ? Pdbuf : P;
            const float *dO = dout + (size_t)b * T * ldo + (size_t)h * dv;
            const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
            for (int i = 0; i < T; i++)
                for (int c = 0; c < dv; c++)
                    G[(size_t)i * dv + c] = sc ? dO[(size_t)i * ldo + c] * sc[c] : dO[(size_t)i * ldo + c];
            cpu_gemm_be(be, 1, 0, T, dv, T, 1.0f, Pd, T, G, dv,
                        1.0f, dv_out + voff, s->ldv);
            cpu_gemm_be(be, 0, 1, T, T, dv, 1.0f, G, dv, p.v, s->ldv,
                        0.0f, dP, T);
            // dP ⊙ keep/(1-p), then dS = P ⊙ (dP - rowsum(P ⊙ dP)), one row at a time so the
            // row stays in cache.  The mask is read off Pd: Pd = 0 where it dropped or where
            // P = 0, and where P = 0 the value of dP does not matter (dS = 0 there).
            const int drop = s->dropout > 0.0f;
            const float inv = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
            for (int i = 0; i < T; i++) {
                const float *pr = P + (size_t)i * T, *pdr = Pd + (size_t)i * T;
                float *gr = dP + (size_t)i * T;
                if (drop) {
#pragma omp simd
                    for (int j = 0; j < T; j++) gr[j] = pdr[j] != 0.0f ? gr[j] * inv : 0.0f;
                }
                double dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int j = 0; j < T; j++) dot += (double)pr[j] * gr[j];
                float fd = (float)dot;
#pragma omp simd
                for (int j = 0; j < T; j++) gr[j] = pr[j] * (gr[j] - fd);
            }
            if (dkey_bias) {
                // Column sums of dS into a contiguous row first (the bias is strided by n).
                float *cs = G + (size_t)T * dv;
                memset(cs, 0, (size_t)T * sizeof *cs);
                for (int i = 0; i < T; i++) {
                    const float *gr = dP + (size_t)i * T;
#pragma omp simd
                    for (int j = 0; j < T; j++) cs[j] += gr[j];
                }
                for (int j = 0; j < T; j++) dkey_bias[((size_t)b * T + j) * n + h] = cs[j];
            }
            if (shared) {
                // Q and K shared by all heads: dQ and dK need only Σ_h dS_h.
    #pragma omp simd
                for (size_t e = 0; e < TT; e++) dS_sum[e] += dP[e];
                continue;
            }
            cpu_gemm_be(be, 0, 0, T, dk_, T, s->scale, dP, T, p.k,
                        s->ldk, 1.0f, dq + qoff, s->ldq);
            cpu_gemm_be(be, 1, 0, T, dk_, T, s->scale, dP, T, p.q,
                        s->ldq, 1.0f, dk + koff, s->ldk);
        }
        if (shared) {
            HeadPtrs p = head_ptrs(s, q, k, v, b, 0);
            cpu_gemm_be(be, 0, 0, T, dk_, T, s->scale, dS_sum, T,
                        p.k, s->ldk, 1.0f, dq + (p.q - q), s->ldq);
            cpu_gemm_be(be, 1, 0, T, dk_, T, s->scale, dS_sum, T, p.q,
                        s->ldq, 1.0f, dk + (p.k - k), s->ldk);
        }
    }
    if (dout_scale || dout_shift) {
        // Blocks of 64 (head, column) pairs, rows inside: contiguous reads, one writer each.
        const int cols = n * dv, with_scale = s->out_scale && dout_scale;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * T * n * dv >= CPU_PARALLEL_MIN_MEM)
        for (int c0 = 0; c0 < cols; c0 += 64) {
            const int w = cols - c0 < 64 ? cols - c0 : 64;
            double ss[64] = {0}, sh[64] = {0};
            for (size_t r = 0; r < (size_t)B * T; r++) {
                const float *g = dout + r * ldo + c0;
                const float *pv = with_scale ? pv_all + r * ldo + c0 : g;
#pragma omp simd
                for (int c = 0; c < w; c++) {
                    ss[c] += (double)g[c] * pv[c];
                    sh[c] += g[c];
                }
            }
            for (int c = 0; c < w; c++) {
                if (with_scale) dout_scale[c0 + c] += (float)ss[c];
                if (dout_shift) dout_shift[c0 + c] += (float)sh[c];
            }
        }
    }
    // Twice the forward's products, plus the recomputed scores.
    cpu_prof_end(be, OPC_ATTENTION, t0,
                 2.0 * attention_flops(s) + 2.0 * B * n * (double)T * T * s->qk_dim);
}

void cpu_install_attention(Backend *be) {
    be->attention_sizes = cpu_attention_sizes;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
}

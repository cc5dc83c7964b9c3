// The attention core (ops.h AttnShape) on the CPU: per (batch, head) oneDNN products for scores
// and weighted sums, fp32 softmax and statistics; only the row log-sum-exp is saved, the
// backward recomputes the scores.  In bf16 mode q, k, v and the output gradient are rounded to
// bf16 once per call (not once per product that reads them), and the softmax and the dS pass
// write their products' operand (P, dropped P, dS) in bf16 directly: no rounding copies per head.
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_bf16.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

// One of q, k, v (or G = dout ⊙ out_scale) as the products read it: fp32 with its row stride,
// or in bf16 mode a contiguous bf16 copy [B*T, heads*dim] made once per call.
typedef struct {
    const float *f;
    int ldf;
    const uint16_t *h;
    int ldh;
} Src;

typedef struct {
    const AttnShape *s;
    CpuGemm *g;
    int bf16;
    Src q, k, v;
} Attn;

// Columns of head h's Q, K, V slices.
static size_t qcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->q_heads)) * s->qk_dim; }
static size_t kcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->k_heads)) * s->qk_dim; }
static size_t vcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->v_heads)) * s->v_dim; }

// Rows of sequence b, starting at column col.
static CpuOperand head_op(const Src *x, int T, int b, size_t col) {
    if (x->h) return (CpuOperand){NULL, x->h + (size_t)b * T * x->ldh + col, x->ldh};
    return (CpuOperand){x->f + (size_t)b * T * x->ldf + col, NULL, x->ldf};
}
static CpuOperand f32_op(const float *x, int ld) { return (CpuOperand){x, NULL, ld}; }
static CpuOperand h_op(const uint16_t *x, int ld) { return (CpuOperand){NULL, x, ld}; }

static void gemm(const Attn *a, int ta, int tb, int M, int N, int K, float alpha, CpuOperand A,
                 CpuOperand B, float beta, float *C, int ldc) {
    cpu_gemm_ex(a->g, a->bf16, ta, tb, M, N, K, alpha, A, B, NULL, beta, C, ldc);
}

static int shares_scores(const AttnShape *s) { return s->q_heads == 1 && s->k_heads == 1 && s->n_heads > 1; }

static void scores(const Attn *a, int b, int h, float *S) {
    const AttnShape *s = a->s;
    gemm(a, 0, 1, s->T, s->T, s->qk_dim, s->scale, head_op(&a->q, s->T, b, qcol(s, h)),
         head_op(&a->k, s->T, b, kcol(s, h)), 0.0f, S, s->T);
}

// S = raw scores of (b, h) (a copy of R when heads share them) plus the per-key bias.
static void head_scores(const Attn *a, int b, int h, const float *R, float *S) {
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads;
    const size_t TT = (size_t)T * T;
    if (R)
        memcpy(S, R, TT * sizeof *S);
    else
        scores(a, b, h, S);
    if (s->key_bias) {
        const float *kb = act_cf(s->key_bias) + (size_t)b * T * n + h;
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
// With Ph (bf16 mode) the probabilities go to Ph in bf16 instead (S keeps the exponentials).
// Branch-free inner loops (masks as selects) so they vectorise, exp by cpu_expf.
static void softmax_rows(const AttnShape *s, int b, int h, float *S, float *lse, uint16_t *Ph) {
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
        uint16_t *ph = Ph ? Ph + (size_t)i * T : NULL;
        if (mx == -INFINITY) {
            if (ph)
                memset(ph, 0, (size_t)T * sizeof *ph);
            else
                memset(row, 0, (size_t)T * sizeof *row);
            lse[i] = -INFINITY;
            continue;
        }
        float sum = 0;
        if (km) {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                float e = km[j] ? cpu_expf_noover(row[j] - mx) : 0.0f;
                row[j] = e;
                sum += e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                float e = cpu_expf_noover(row[j] - mx);
                row[j] = e;
                sum += e;
            }
        }
        const float inv = 1.0f / sum;
        const uint64_t rb = base + (uint64_t)i * T;
        if (ph) {
            if (je < T) memset(ph + je, 0, (size_t)(T - je) * sizeof *ph);
            if (drop) {
#pragma omp simd
                for (int j = 0; j < je; j++)
                    ph[j] = to_bf16(ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * inv * keep_scale : 0.0f);
            } else {
#pragma omp simd
                for (int j = 0; j < je; j++) ph[j] = to_bf16(row[j] * inv);
            }
        } else {
            if (je < T) memset(row + je, 0, (size_t)(T - je) * sizeof *row);
            if (drop) {
#pragma omp simd
                for (int j = 0; j < je; j++)
                    row[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * inv * keep_scale : 0.0f;
            } else {
#pragma omp simd
                for (int j = 0; j < je; j++) row[j] *= inv;
            }
        }
        lse[i] = mx + logf(sum);
    }
}

// The backward's probabilities from the saved row log-sum-exp: P = exp(S - lse) where visible.
// With dropout, Pd (head h's dropped probabilities, as the forward used them) is written in
// the same pass; with Pdh (bf16 mode) the dropped (or, without dropout, plain) probabilities
// are written in bf16 there instead.
static void probs_from_lse(const AttnShape *s, int b, int h, float *S, const float *lse, float *Pd,
                           uint16_t *Pdh) {
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
            for (int j = 0; j < je; j++) row[j] = km[j] ? cpu_expf_noover(row[j] - l) : 0.0f;
        } else {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = cpu_expf_noover(row[j] - l);
        }
        if (je < T) memset(row + je, 0, (size_t)(T - je) * sizeof *row);
        const uint64_t rb = base + (uint64_t)i * T;
        if (Pdh) {
            uint16_t *pd = Pdh + (size_t)i * T;
            if (drop) {
#pragma omp simd
                for (int j = 0; j < T; j++)
                    pd[j] = to_bf16(ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * keep_scale : 0.0f);
            } else {
#pragma omp simd
                for (int j = 0; j < T; j++) pd[j] = to_bf16(row[j]);
            }
        } else if (drop) {
            float *pd = Pd + (size_t)i * T;
#pragma omp simd
            for (int j = 0; j < T; j++) pd[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * keep_scale : 0.0f;
        }
    }
}

// Only the row log-sum-exp is saved ([B, n, T]): the backward recomputes the scores, so memory
// stays O(T) per head instead of O(T²).  Scratch is per thread (T² blocks; in bf16 mode a
// block holds two bf16 T² matrices), then, in bf16 mode, the call's bf16 copies of q, k, v and
// G (bf16_floats).
#define FWD_TT 3
#define BWD_TT 5
static size_t align32(size_t n) { return (n + 31) / 32 * 32; }
static size_t fwd_thread_floats(const AttnShape *s) { return FWD_TT * (size_t)s->T * s->T; }
static size_t bwd_thread_floats(const AttnShape *s) {
    return BWD_TT * (size_t)s->T * s->T + (size_t)s->T * s->v_dim + s->T;
}
static size_t bf16_floats(const AttnShape *s) {
    const size_t rows = (size_t)s->B * s->T;
    const size_t qn = align32(rows * s->q_heads * s->qk_dim), kn = align32(rows * s->k_heads * s->qk_dim);
    const size_t vn = align32(rows * s->v_heads * s->v_dim), gn = align32(rows * s->n_heads * s->v_dim);
    return (qn + kn + vn + gn) / 2 + 32;
}
static void cpu_attention_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t T = (size_t)s->T, nt = (size_t)cpu_threads(be);
    // Room for the unscaled P V too (the output scale's gradient needs it), whether or not
    // this shape has out_scale set: callers may size with a shape whose pointers are unset.
    *saved = (size_t)s->B * s->n_heads * T + (size_t)s->B * T * s->n_heads * s->v_dim;
    size_t fwd = nt * fwd_thread_floats(s), bwd = nt * bwd_thread_floats(s);
    *scratch = align32(fwd > bwd ? fwd : bwd) + (cpu_ctx(be)->bf16 ? bf16_floats(s) : 0);
}

static double attention_flops(const AttnShape *s) {
    return 2.0 * s->B * s->n_heads * (double)s->T * s->T * (s->qk_dim + s->v_dim);
}

// The call's operands; in bf16 mode q, k, v rounded once into the scratch after the
// per-thread blocks (bf16 then points past them, where G may follow).
static Attn attn_begin(Backend *be, const AttnShape *s, const float *q, const float *k,
                       const float *v, float *bf16) {
    Attn a = {s, cpu_ctx(be)->gemm, cpu_ctx(be)->bf16,
              {q, s->ldq, NULL, 0}, {k, s->ldk, NULL, 0}, {v, s->ldv, NULL, 0}};
    if (!a.bf16) return a;
    const int rows = s->B * s->T;
    Src *x[3] = {&a.q, &a.k, &a.v};
    const int cols[3] = {s->q_heads * s->qk_dim, s->k_heads * s->qk_dim, s->v_heads * s->v_dim};
    uint16_t *h = (uint16_t *)bf16;
    for (int i = 0; i < 3; i++) {
        cpu_pack_bf16(x[i]->f, rows, cols[i], x[i]->ldf, h);
        x[i]->h = h;
        x[i]->ldh = cols[i];
        h += align32((size_t)rows * cols[i]);
    }
    return a;
}
static uint16_t *attn_bf16_after_qkv(const AttnShape *s, float *bf16) {
    const size_t rows = (size_t)s->B * s->T;
    return (uint16_t *)bf16 + align32(rows * s->q_heads * s->qk_dim) +
           align32(rows * s->k_heads * s->qk_dim) + align32(rows * s->v_heads * s->v_dim);
}

// One head of one sequence: scores, softmax (lse saved), dropout, P V, output scale/shift.
static void forward_head(const Attn *a, float *out, float *lse_all, int b, int h, const float *R,
                         float *ws) {
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim, ldo = n * dv;
    float *S = ws;
    uint16_t *Ph = a->bf16 ? (uint16_t *)(ws + (size_t)T * T) : NULL;
    head_scores(a, b, h, R, S);
    softmax_rows(s, b, h, S, lse_all + ((size_t)b * n + h) * T, Ph);
    // S (or Ph) holds the dropped probabilities.
    float *o = out + (size_t)b * T * ldo + (size_t)h * dv;
    gemm(a, 0, 0, T, dv, T, 1.0f, Ph ? h_op(Ph, T) : f32_op(S, T), head_op(&a->v, T, b, vcol(s, h)),
         0.0f, o, ldo);
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

static void cpu_attention_forward(Backend *be, const AttnShape *s, const Act *qa,
                                  const Act *ka, const Act *va, Act *outa, float *saved,
                                  float *scratch) {
    const float *q = act_cf(qa), *k = act_cf(ka), *v = act_cf(va);
    float *out = act_f(outa);
    double t0 = cpu_prof_begin(be);
    const int B = s->B, n = s->n_heads, nt = cpu_threads(be);
    const size_t TT = (size_t)s->T * s->T, per_thread = fwd_thread_floats(s);
    const Attn a = attn_begin(be, s, q, k, v, scratch + align32(nt * per_thread));
    if (shares_scores(s)) {
        // sha / mhe_add: every head has the same raw scores, one product per sequence.
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int b = 0; b < B; b++) {
            float *ws = scratch + (size_t)omp_get_thread_num() * per_thread, *R = ws + 2 * TT;
            scores(&a, b, 0, R);
            for (int h = 0; h < n; h++) forward_head(&a, out, saved, b, h, R, ws);
        }
    } else {
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int bh = 0; bh < B * n; bh++)
            forward_head(&a, out, saved, bh / n, bh % n, NULL,
                         scratch + (size_t)omp_get_thread_num() * per_thread);
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
static void cpu_attention_backward(Backend *be, const AttnShape *s, const Act *qa,
                                   const Act *ka, const Act *va, const float *saved,
                                   const Act *douta, Act *dqa, Act *dka, Act *dva,
                                   Act *dkey_biasa, float *dout_scale, float *dout_shift,
                                   float *scratch) {
    const float *q = act_cf(qa), *k = act_cf(ka), *v = act_cf(va), *dout = act_cf(douta);
    float *dq = act_f(dqa), *dk = act_f(dka), *dv_out = act_f(dva), *dkey_bias = act_f(dkey_biasa);
    double t0 = cpu_prof_begin(be);
    const int B = s->B, T = s->T, n = s->n_heads, dv = s->v_dim, dk_ = s->qk_dim, nt = cpu_threads(be);
    const size_t TT = (size_t)T * T;
    const int ldo = n * dv;
    const size_t per_thread = bwd_thread_floats(s);
    const int shared = shares_scores(s), drop = s->dropout > 0.0f;
    const float *pv_all = saved + (size_t)B * n * T;  // the forward's unscaled P V
    float *bf16 = scratch + align32(nt * per_thread);
    const Attn a = attn_begin(be, s, q, k, v, bf16);
    // bf16 mode: G = dO ⊙ out_scale for every head at once, in bf16.
    Src G_all = {NULL, 0, NULL, 0};
    if (a.bf16) {
        uint16_t *g = attn_bf16_after_qkv(s, bf16);
        const float *sc = s->out_scale;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * ldo >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < B * T; r++) {
            const float *d = dout + (size_t)r * ldo;
            uint16_t *o = g + (size_t)r * ldo;
            if (sc) {
#pragma omp simd
                for (int c = 0; c < ldo; c++) o[c] = to_bf16(d[c] * sc[c]);
            } else {
#pragma omp simd
                for (int c = 0; c < ldo; c++) o[c] = to_bf16(d[c]);
            }
        }
        G_all = (Src){NULL, 0, g, ldo};
    }
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
    for (int b = 0; b < B; b++) {
        float *ws = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *Pdbuf = ws, *dP = ws + TT, *dS_sum = ws + 2 * TT, *R = ws + 3 * TT, *P = ws + 4 * TT;
        float *G = ws + BWD_TT * TT;
        // bf16 mode: the dropped probabilities and dS, each T² bf16, in Pdbuf's block.
        uint16_t *Pdh = a.bf16 ? (uint16_t *)Pdbuf : NULL, *dSh = a.bf16 ? Pdh + TT : NULL;
        if (shared) {
            memset(dS_sum, 0, TT * sizeof *dS_sum);
            scores(&a, b, 0, R);
        }
        zero_cols(dq + (size_t)b * T * s->ldq, T, s->ldq, s->q_heads * dk_);
        zero_cols(dk + (size_t)b * T * s->ldk, T, s->ldk, s->k_heads * dk_);
        zero_cols(dv_out + (size_t)b * T * s->ldv, T, s->ldv, s->v_heads * dv);
        for (int h = 0; h < n; h++) {
            const size_t qoff = (size_t)b * T * s->ldq + qcol(s, h), koff = (size_t)b * T * s->ldk + kcol(s, h);
            const size_t voff = (size_t)b * T * s->ldv + vcol(s, h);
            head_scores(&a, b, h, shared ? R : NULL, P);
            probs_from_lse(s, b, h, P, saved + ((size_t)b * n + h) * T, Pdbuf, Pdh);
            CpuOperand Pd = Pdh ? h_op(Pdh, T) : f32_op(drop ? Pdbuf : P, T), Gh;
            if (a.bf16) {
                Gh = head_op(&G_all, T, b, (size_t)h * dv);
            } else {
                const float *dO = dout + (size_t)b * T * ldo + (size_t)h * dv;
                const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
                for (int i = 0; i < T; i++)
                    for (int c = 0; c < dv; c++)
                        G[(size_t)i * dv + c] = sc ? dO[(size_t)i * ldo + c] * sc[c] : dO[(size_t)i * ldo + c];
                Gh = f32_op(G, dv);
            }
            gemm(&a, 1, 0, T, dv, T, 1.0f, Pd, Gh, 1.0f, dv_out + voff, s->ldv);
            gemm(&a, 0, 1, T, T, dv, 1.0f, Gh, head_op(&a.v, T, b, vcol(s, h)), 0.0f, dP, T);
            // dP ⊙ keep/(1-p), then dS = P ⊙ (dP - rowsum(P ⊙ dP)), one row at a time so the
            // row stays in cache.  The mask is read off Pd: Pd = 0 where it dropped or where
            // P = 0 (a non-zero P is >= 2^-126, never 0 in bf16), and where P = 0 the value
            // of dP does not matter (dS = 0 there).  In bf16 mode dS also goes to dSh, the
            // operand of dQ and dK (not needed when the heads share Q and K).
            const float inv = drop ? 1.0f / (1.0f - s->dropout) : 1.0f;
            uint16_t *dsh_all = shared ? NULL : dSh;
            for (int i = 0; i < T; i++) {
                const float *pr = P + (size_t)i * T;
                float *gr = dP + (size_t)i * T;
                if (drop && Pdh) {
                    const uint16_t *pdr = Pdh + (size_t)i * T;
#pragma omp simd
                    for (int j = 0; j < T; j++) gr[j] = pdr[j] != 0 ? gr[j] * inv : 0.0f;
                } else if (drop) {
                    const float *pdr = Pdbuf + (size_t)i * T;
#pragma omp simd
                    for (int j = 0; j < T; j++) gr[j] = pdr[j] != 0.0f ? gr[j] * inv : 0.0f;
                }
                double dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int j = 0; j < T; j++) dot += (double)pr[j] * gr[j];
                float fd = (float)dot;
                if (dsh_all) {
                    uint16_t *dr = dsh_all + (size_t)i * T;
#pragma omp simd
                    for (int j = 0; j < T; j++) {
                        const float d = pr[j] * (gr[j] - fd);
                        gr[j] = d;
                        dr[j] = to_bf16(d);
                    }
                } else {
#pragma omp simd
                    for (int j = 0; j < T; j++) gr[j] = pr[j] * (gr[j] - fd);
                }
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
            const CpuOperand dS = dSh ? h_op(dSh, T) : f32_op(dP, T);
            gemm(&a, 0, 0, T, dk_, T, s->scale, dS, head_op(&a.k, T, b, kcol(s, h)), 1.0f, dq + qoff, s->ldq);
            gemm(&a, 1, 0, T, dk_, T, s->scale, dS, head_op(&a.q, T, b, qcol(s, h)), 1.0f, dk + koff, s->ldk);
        }
        if (shared) {
            CpuOperand dS = f32_op(dS_sum, T);
            if (dSh) {
                cpu_pack_bf16(dS_sum, T, T, T, dSh);
                dS = h_op(dSh, T);
            }
            gemm(&a, 0, 0, T, dk_, T, s->scale, dS, head_op(&a.k, T, b, 0), 1.0f,
                 dq + (size_t)b * T * s->ldq, s->ldq);
            gemm(&a, 1, 0, T, dk_, T, s->scale, dS, head_op(&a.q, T, b, 0), 1.0f,
                 dk + (size_t)b * T * s->ldk, s->ldk);
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

// The reference attention core (ops.h AttnShape) on the CPU, kept as the oracle of the fused core
// (cpu_attention.c) and selectable with MHE_CPU_ATTENTION=ref: per (batch, head) oneDNN products for scores
// and weighted sums, fp32 softmax and statistics; only the row log-sum-exp is saved, the
// backward recomputes the scores.  In bf16 mode q, k, v, key_bias and dout are bf16 activations
// that the products read where they are, the softmax and the dS pass write their products'
// operand (P, dropped P, dS) in bf16 directly, and out, dq, dk, dv, dkey_bias are stored in bf16
// once per element: dq, dk, dv are summed over a sequence's heads in per-thread fp32 rows first.
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_attention.h"
#include "kernels/cpu/cpu_bf16.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

typedef struct {
    const AttnShape *s;
    CpuGemm *g;
    int bf16;
    Src q, k, v;
} Attn;

// Rows of sequence b, starting at column col.
static CpuOperand head_op(const Src *x, int T, int b, size_t col) {
    if (x->h) return (CpuOperand){NULL, x->h + (size_t)b * T * x->ld + col, x->ld};
    return (CpuOperand){x->f + (size_t)b * T * x->ld + col, NULL, x->ld};
}
static CpuResult f32_res(float *x, int ld) { return (CpuResult){x, NULL, ld}; }

static void gemm(const Attn *a, int ta, int tb, int M, int N, int K, float alpha, CpuOperand A,
                 CpuOperand B, float beta, CpuResult C) {
    cpu_gemm_ex(a->g, a->bf16, ta, tb, M, N, K, alpha, A, B, NULL, beta, C);
}

static int shares_scores(const AttnShape *s) { return s->q_heads == 1 && s->k_heads == 1 && s->n_heads > 1; }

static void scores(const Attn *a, int b, int h, float *S) {
    const AttnShape *s = a->s;
    gemm(a, 0, 1, s->T, s->T, s->qk_dim, s->scale, head_op(&a->q, s->T, b, qcol(s, h)),
         head_op(&a->k, s->T, b, kcol(s, h)), 0.0f, f32_res(S, s->T));
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
    if (s->key_bias && a->bf16) {
        const uint16_t *kb = act_ch(s->key_bias) + (size_t)b * T * n + h;
        for (int i = 0; i < T; i++) {
            float *row = S + (size_t)i * T;
            for (int j = 0; j < T; j++) row[j] += from_bf16(kb[(size_t)j * n]);
        }
    } else if (s->key_bias) {
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
// block holds two bf16 T² matrices, and the thread also has fp32 rows for one head's output, or
// for a sequence's dq, dk, dv), then, in bf16 mode, the call's G = dO ⊙ out_scale in bf16.
#define FWD_TT 3
#define BWD_TT 5
static size_t align32(size_t n) { return (n + 31) / 32 * 32; }
static size_t fwd_thread_floats(const AttnShape *s, int bf16) {
    return FWD_TT * (size_t)s->T * s->T + (bf16 ? (size_t)s->T * s->v_dim : 0);
}
// dq, dk, dv of one sequence (bf16 mode): fp32 rows [T, heads*dim] each.
static size_t qcols(const AttnShape *s) { return (size_t)s->q_heads * s->qk_dim; }
static size_t kcols(const AttnShape *s) { return (size_t)s->k_heads * s->qk_dim; }
static size_t vcols(const AttnShape *s) { return (size_t)s->v_heads * s->v_dim; }
static size_t bwd_thread_floats(const AttnShape *s, int bf16) {
    return BWD_TT * (size_t)s->T * s->T + (size_t)s->T * s->v_dim + s->T +
           (bf16 ? (size_t)s->T * (qcols(s) + kcols(s) + vcols(s)) : 0);
}
static size_t g_floats(const AttnShape *s) { return align32((size_t)s->B * s->T * s->n_heads * s->v_dim) / 2 + 32; }
static void cpu_attention_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t T = (size_t)s->T, nt = (size_t)cpu_threads(be);
    const int bf = act_bf16(be);
    // Room for the unscaled P V too (the output scale's gradient needs it), whether or not
    // this shape has out_scale set: callers may size with a shape whose pointers are unset.
    *saved = (size_t)s->B * s->n_heads * T + (size_t)s->B * T * s->n_heads * s->v_dim;
    size_t fwd = nt * fwd_thread_floats(s, bf), bwd = nt * bwd_thread_floats(s, bf);
    *scratch = align32(fwd > bwd ? fwd : bwd) + (bf ? g_floats(s) : 0);
}

static Attn attn_begin(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v) {
    Attn a = {s, cpu_ctx(be)->gemm, act_bf16(be), src_of(be, q, s->ldq), src_of(be, k, s->ldk),
              src_of(be, v, s->ldv)};
    return a;
}

// One head of one sequence: scores, softmax (lse saved), dropout, P V, output scale/shift.
static void forward_head(const Attn *a, Act *out_act, float *lse_all, int b, int h, const float *R,
                         float *ws) {
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim;
    const int ldo = n * dv;
    float *S = ws;
    uint16_t *Ph = a->bf16 ? (uint16_t *)(ws + (size_t)T * T) : NULL;
    head_scores(a, b, h, R, S);
    softmax_rows(s, b, h, S, lse_all + ((size_t)b * n + h) * T, Ph);
    // S (or Ph) holds the dropped probabilities.
    const size_t at = (size_t)b * T * ldo + (size_t)h * dv;
    const CpuOperand P = Ph ? h_op(Ph, T) : f32_op(S, T), V = head_op(&a->v, T, b, vcol(s, h));
    const int affine = s->out_scale || s->out_shift;
    if (a->bf16 && !affine) {
        gemm(a, 0, 0, T, dv, T, 1.0f, P, V, 0.0f, (CpuResult){NULL, act_h(out_act) + at, ldo});
        return;
    }
    // bf16 with an output scale or shift: P V in fp32 rows of the thread's block (the scale's
    // gradient saves it unrounded), rounded once after the affine map.
    float *o = a->bf16 ? ws + FWD_TT * (size_t)T * T : act_f(out_act) + at;
    const int ld_o = a->bf16 ? dv : ldo;
    gemm(a, 0, 0, T, dv, T, 1.0f, P, V, 0.0f, f32_res(o, ld_o));
    if (s->out_scale) {
        // Saved after the row log-sum-exps: d out_scale = Σ_rows dO ⊙ (P V).
        float *pv = lse_all + (size_t)s->B * n * T + (size_t)b * T * ldo + (size_t)h * dv;
        for (int i = 0; i < T; i++) memcpy(pv + (size_t)i * ldo, o + (size_t)i * ld_o, (size_t)dv * sizeof *pv);
    }
    if (affine) {
        const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
        const float *sh = s->out_shift ? s->out_shift + (size_t)h * dv : NULL;
        for (int i = 0; i < T; i++) {
            float *r = o + (size_t)i * ld_o;
            if (a->bf16) {
                uint16_t *oh = act_h(out_act) + at + (size_t)i * ldo;
                for (int c = 0; c < dv; c++) oh[c] = to_bf16((sc ? r[c] * sc[c] : r[c]) + (sh ? sh[c] : 0.0f));
            } else {
                for (int c = 0; c < dv; c++) r[c] = (sc ? r[c] * sc[c] : r[c]) + (sh ? sh[c] : 0.0f);
            }
        }
    }
}

static void cpu_attention_forward(Backend *be, const AttnShape *s, const Act *q,
                                  const Act *k, const Act *v, Act *out, float *saved,
                                  float *scratch) {
    double t0 = cpu_prof_begin(be);
    const int B = s->B, n = s->n_heads, nt = cpu_threads(be);
    const size_t TT = (size_t)s->T * s->T, per_thread = fwd_thread_floats(s, act_bf16(be));
    const Attn a = attn_begin(be, s, q, k, v);
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

// d out_scale += Σ_rows dO ⊙ (P V) and d out_shift += Σ_rows dO over all B*T rows (pv_all: the
// forward's unscaled P V, saved after the row log-sum-exps).  Shared by both cores.
void cpu_attention_affine_grads(Backend *be, const AttnShape *s, const float *pv_all, const Act *dout,
                                float *dout_scale, float *dout_shift) {
    const int B = s->B, T = s->T, n = s->n_heads, dv = s->v_dim, ldo = n * dv, bf = act_bf16(be);
    if (!dout_scale && !dout_shift) return;
    // Blocks of 64 (head, column) pairs, rows inside: contiguous reads, one writer each.
    const int cols = n * dv, with_scale = s->out_scale && dout_scale;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * T * n * dv >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < cols; c0 += 64) {
        const int w = cols - c0 < 64 ? cols - c0 : 64;
        double ss[64] = {0}, sh[64] = {0};
        for (size_t r = 0; r < (size_t)B * T; r++) {
            if (bf) {
                const uint16_t *g = act_ch(dout) + r * ldo + c0;
                const float *pv = pv_all + r * ldo + c0;
#pragma omp simd
                for (int c = 0; c < w; c++) {
                    const float gc = from_bf16(g[c]);
                    ss[c] += (double)gc * (with_scale ? pv[c] : gc);
                    sh[c] += gc;
                }
                continue;
            }
            const float *g = act_cf(dout) + r * ldo + c0;
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

static void zero_cols(float *x, int rows, int ld, int cols) {
    for (int r = 0; r < rows; r++) memset(x + (size_t)r * ld, 0, (size_t)cols * sizeof *x);
}

// Per (b, h), with G = dO ⊙ scale and Pd the dropped probabilities:
//   dV += Pdᵀ G;  dP = (G Vᵀ) ⊙ keep/(1-p);  dS = P ⊙ (dP - rowsum(P ⊙ dP));
//   dQ += scale dS K;  dK += scale dSᵀ Q;  dbias[j] = Σ_i dS[i, j].
// Sequences run in parallel; the heads of one sequence run in order because they may share
// the same K/V (or Q) rows.
// The sequence's gradient rows [T, cols] in fp32 (bf16 mode: the thread's accumulators, ld =
// cols) stored into the bf16 activation x (row stride ld), each element rounded once.
static void store_rows(const float *acc, int T, size_t cols, uint16_t *x, int ld) {
    for (int i = 0; i < T; i++) bf16_store(acc + (size_t)i * cols, cols, x + (size_t)i * ld);
}

static void cpu_attention_backward(Backend *be, const AttnShape *s, const Act *q,
                                   const Act *k, const Act *v, const float *saved,
                                   const Act *dout, Act *dq, Act *dk, Act *dv_out,
                                   Act *dkey_bias, float *dout_scale, float *dout_shift,
                                   float *scratch) {
    double t0 = cpu_prof_begin(be);
    const int B = s->B, T = s->T, n = s->n_heads, dv = s->v_dim, dk_ = s->qk_dim, nt = cpu_threads(be);
    const size_t TT = (size_t)T * T;
    const int ldo = n * dv;
    const int bf = act_bf16(be);
    const size_t per_thread = bwd_thread_floats(s, bf);
    const int shared = shares_scores(s), drop = s->dropout > 0.0f;
    const float *pv_all = saved + (size_t)B * n * T;  // the forward's unscaled P V
    const Attn a = attn_begin(be, s, q, k, v);
    // bf16 mode: G = dO ⊙ out_scale for every head at once, in bf16 (dO itself without a scale).
    Src G_all = src_of(be, dout, ldo);
    if (bf && s->out_scale) {
        uint16_t *g = (uint16_t *)(scratch + align32(nt * per_thread));
        const float *sc = s->out_scale;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * ldo >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < B * T; r++) {
            const uint16_t *d = act_ch(dout) + (size_t)r * ldo;
            uint16_t *o = g + (size_t)r * ldo;
#pragma omp simd
            for (int c = 0; c < ldo; c++) o[c] = to_bf16(from_bf16(d[c]) * sc[c]);
        }
        G_all = (Src){NULL, g, ldo};
    }
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
    for (int b = 0; b < B; b++) {
        float *ws = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *Pdbuf = ws, *dP = ws + TT, *dS_sum = ws + 2 * TT, *R = ws + 3 * TT, *P = ws + 4 * TT;
        float *G = ws + BWD_TT * TT;
        // bf16 mode: the dropped probabilities and dS, each T² bf16, in Pdbuf's block.
        uint16_t *Pdh = bf ? (uint16_t *)Pdbuf : NULL, *dSh = bf ? Pdh + TT : NULL;
        // Where dq, dk, dv of sequence b accumulate: the outputs (fp32) or the thread's fp32
        // rows after G and the key-bias row (bf16, stored once the sequence is done).
        float *acc = G + (size_t)T * dv + T;
        float *dqb = bf ? acc : act_f(dq) + (size_t)b * T * s->ldq;
        float *dkb = bf ? dqb + (size_t)T * qcols(s) : act_f(dk) + (size_t)b * T * s->ldk;
        float *dvb = bf ? dkb + (size_t)T * kcols(s) : act_f(dv_out) + (size_t)b * T * s->ldv;
        const int ldq = bf ? (int)qcols(s) : s->ldq, ldk = bf ? (int)kcols(s) : s->ldk;
        const int ldv = bf ? (int)vcols(s) : s->ldv;
        if (shared) {
            memset(dS_sum, 0, TT * sizeof *dS_sum);
            scores(&a, b, 0, R);
        }
        zero_cols(dqb, T, ldq, s->q_heads * dk_);
        zero_cols(dkb, T, ldk, s->k_heads * dk_);
        zero_cols(dvb, T, ldv, s->v_heads * dv);
        for (int h = 0; h < n; h++) {
            const size_t qoff = qcol(s, h), koff = kcol(s, h), voff = vcol(s, h);
            head_scores(&a, b, h, shared ? R : NULL, P);
            probs_from_lse(s, b, h, P, saved + ((size_t)b * n + h) * T, Pdbuf, Pdh);
            CpuOperand Pd = Pdh ? h_op(Pdh, T) : f32_op(drop ? Pdbuf : P, T), Gh;
            if (bf) {
                Gh = head_op(&G_all, T, b, (size_t)h * dv);
            } else {
                const float *dO = act_cf(dout) + (size_t)b * T * ldo + (size_t)h * dv;
                const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
                for (int i = 0; i < T; i++)
                    for (int c = 0; c < dv; c++)
                        G[(size_t)i * dv + c] = sc ? dO[(size_t)i * ldo + c] * sc[c] : dO[(size_t)i * ldo + c];
                Gh = f32_op(G, dv);
            }
            gemm(&a, 1, 0, T, dv, T, 1.0f, Pd, Gh, 1.0f, f32_res(dvb + voff, ldv));
            gemm(&a, 0, 1, T, T, dv, 1.0f, Gh, head_op(&a.v, T, b, vcol(s, h)), 0.0f, f32_res(dP, T));
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
                const size_t kb0 = (size_t)b * T * n + h;
                if (bf)
                    for (int j = 0; j < T; j++) act_h(dkey_bias)[kb0 + (size_t)j * n] = to_bf16(cs[j]);
                else
                    for (int j = 0; j < T; j++) act_f(dkey_bias)[kb0 + (size_t)j * n] = cs[j];
            }
            if (shared) {
                // Q and K shared by all heads: dQ and dK need only Σ_h dS_h.
#pragma omp simd
                for (size_t e = 0; e < TT; e++) dS_sum[e] += dP[e];
                continue;
            }
            const CpuOperand dS = dSh ? h_op(dSh, T) : f32_op(dP, T);
            gemm(&a, 0, 0, T, dk_, T, s->scale, dS, head_op(&a.k, T, b, kcol(s, h)), 1.0f, f32_res(dqb + qoff, ldq));
            gemm(&a, 1, 0, T, dk_, T, s->scale, dS, head_op(&a.q, T, b, qcol(s, h)), 1.0f, f32_res(dkb + koff, ldk));
        }
        if (shared) {
            CpuOperand dS = f32_op(dS_sum, T);
            if (dSh) {
                cpu_pack_bf16(dS_sum, T, T, T, dSh);
                dS = h_op(dSh, T);
            }
            gemm(&a, 0, 0, T, dk_, T, s->scale, dS, head_op(&a.k, T, b, 0), 1.0f, f32_res(dqb, ldq));
            gemm(&a, 1, 0, T, dk_, T, s->scale, dS, head_op(&a.q, T, b, 0), 1.0f, f32_res(dkb, ldk));
        }
        if (bf) {
            store_rows(dqb, T, qcols(s), act_h(dq) + (size_t)b * T * s->ldq, s->ldq);
            store_rows(dkb, T, kcols(s), act_h(dk) + (size_t)b * T * s->ldk, s->ldk);
            store_rows(dvb, T, vcols(s), act_h(dv_out) + (size_t)b * T * s->ldv, s->ldv);
        }
    }
    cpu_attention_affine_grads(be, s, pv_all, dout, dout_scale, dout_shift);
    // Twice the forward's products, plus the recomputed scores.
    cpu_prof_end(be, OPC_ATTENTION, t0,
                 2.0 * attention_flops(s) + 2.0 * B * n * (double)T * T * s->qk_dim);
}

void cpu_install_attention_ref(Backend *be) {
    be->attention_sizes = cpu_attention_sizes;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
}

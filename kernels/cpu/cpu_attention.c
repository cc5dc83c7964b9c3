// The fused attention core (ops.h AttnShape) of the CPU backend, the default (MHE_CPU_ATTENTION=ref
// selects the reference core of cpu_attention_ref.c, its test oracle).
//
// Query rows go in blocks of bq rows (block_rows: bq * T fp32 scores = 256 KiB) and each block
// holds a full row of keys, [bq, T] (causal: [bq, i1], the keys up to the block's last row, so
// blocks above the diagonal are never computed).  No T x T matrix exists; the per-thread blocks
// stay in L2.  A full row rather than an online softmax over key tiles: the row maximum and sum
// are the reference core's exactly (no rescaling of partial outputs), the backward's
// rowsum(P ⊙ dP) comes from the same block, and at the project's T (<= 2048) a row of keys fits
// in cache anyway.  Products go through cpu_gemm_ex per block (bf16 operands in bf16 mode: the
// activations as they are, P, dropped P and dS written in bf16 by the element loops).
//
// Work: the forward runs (batch, head, query block) items (shared scores: (batch, query block),
// the heads inside), dynamically scheduled.  The backward runs (batch, query block) items with
// the heads inside, round-robin over the team: dq rows of a block are the item's own, but dk, dv
// and dkey_bias sum over all query blocks of a sequence, so each thread sums its blocks' part in
// fp32 rows of its own and hands them over once per sequence, in a fixed order (a ticket per
// sequence: rank = the order of the threads' first blocks), so the sums do not depend on timing.
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_attention.h"
#include "kernels/cpu/cpu_bf16.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

typedef struct {
    const float *f;
    const uint16_t *h;
    int ld;
} Src;

typedef struct {
    const AttnShape *s;
    CpuGemm *g;
    int bf16;
    int bq, nqb;         // query rows per block, blocks per sequence
    Src q, k, v;
    int drop;
    float keep_scale;
    uint64_t key;
    uint32_t thr;
} Fused;

// 64K fp32 scores per block (256 KiB): bq = 128 at T <= 512, 64 at 1024, 32 at 2048; a
// multiple of 16 rows so the products' row blocking is whole.  MHE_CPU_ATTN_BLOCK overrides
// (tuning).
static int block_override = -1;
static int block_rows(int T) {
    int bq = block_override > 0 ? block_override : 65536 / (T > 0 ? T : 1) / 16 * 16;
    if (bq < 16) bq = 16;
    if (block_override <= 0 && bq > 128) bq = 128;
    return bq < T ? bq : T;
}

static size_t qcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->q_heads)) * s->qk_dim; }
static size_t kcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->k_heads)) * s->qk_dim; }
static size_t vcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->v_heads)) * s->v_dim; }
static int qcols(const AttnShape *s) { return s->q_heads * s->qk_dim; }
static int kcols(const AttnShape *s) { return s->k_heads * s->qk_dim; }
static int vcols(const AttnShape *s) { return s->v_heads * s->v_dim; }
// The thread's key-side gradient rows: dk | dv | dkey_bias (one column per head).
static int acc_ld(const AttnShape *s) { return kcols(s) + vcols(s) + s->n_heads; }
static int shares_scores(const AttnShape *s) { return s->q_heads == 1 && s->k_heads == 1 && s->n_heads > 1; }

// Rows from absolute row r0 (b*T + i) at column col.
static CpuOperand rows_op(const Src *x, size_t r0, size_t col) {
    if (x->h) return (CpuOperand){NULL, x->h + r0 * x->ld + col, x->ld};
    return (CpuOperand){x->f + r0 * x->ld + col, NULL, x->ld};
}
static CpuOperand f32_op(const float *x, int ld) { return (CpuOperand){x, NULL, ld}; }
static CpuOperand h_op(const uint16_t *x, int ld) { return (CpuOperand){NULL, x, ld}; }
static CpuResult f32_res(float *x, int ld) { return (CpuResult){x, NULL, ld}; }

static void gemm(const Fused *a, int ta, int tb, int M, int N, int K, float alpha, CpuOperand A,
                 CpuOperand B, float beta, CpuResult C) {
    cpu_gemm_ex(a->g, a->bf16, ta, tb, M, N, K, alpha, A, B, NULL, beta, C);
}

// Raw scores of query rows [i0, i0+rows) of sequence b against keys [0, nk): S [rows, nk].
static void scores(const Fused *a, int b, int h, int i0, int rows, int nk, float *S) {
    const AttnShape *s = a->s;
    const size_t r0 = (size_t)b * s->T;
    gemm(a, 0, 1, rows, nk, s->qk_dim, s->scale, rows_op(&a->q, r0 + i0, qcol(s, h)),
         rows_op(&a->k, r0, kcol(s, h)), 0.0f, f32_res(S, nk));
}

// kadd[j], j < nk: head h's bias of key j, -inf where key_mask hides it.  0: neither is set
// (the loops then add nothing).  One strided gather per block instead of one per score.
static int key_add(const Fused *a, int b, int h, int nk, float *kadd) {
    const AttnShape *s = a->s;
    const int32_t *km = s->key_mask ? s->key_mask + (size_t)b * s->T : NULL;
    if (!km && !s->key_bias) return 0;
    const size_t n = (size_t)s->n_heads, at = (size_t)b * s->T * n + h;
    if (s->key_bias && a->bf16) {
        const uint16_t *kb = act_ch(s->key_bias) + at;
        for (int j = 0; j < nk; j++) kadd[j] = from_bf16(kb[j * n]);
    } else if (s->key_bias) {
        const float *kb = act_cf(s->key_bias) + at;
        for (int j = 0; j < nk; j++) kadd[j] = kb[j * n];
    } else {
        memset(kadd, 0, (size_t)nk * sizeof *kadd);
    }
    if (km)
#pragma omp simd
        for (int j = 0; j < nk; j++) kadd[j] = km[j] ? kadd[j] : -INFINITY;
    return 1;
}

static int row_end(const AttnShape *s, int i, int nk) { return s->causal ? i + 1 : nk; }
static uint64_t drop_base(const AttnShape *s, int b, int h, int i) {
    return (((uint64_t)b * s->n_heads + h) * (uint64_t)s->T + (uint64_t)i) * (uint64_t)s->T;
}

// Softmax of block rows [i0, i0+rows) in place: S [rows, nk] (+ kadd) becomes the dropped
// probabilities (fp32 mode) or they go to Ph in bf16; lse[i] saved.  Masked keys (kadd = -inf,
// or above the diagonal) get exactly 0; a row with no visible key is all 0 with lse = -inf.
static void softmax_block(const Fused *a, int b, int h, int i0, int rows, int nk, float *S,
                          const float *kadd, float *lse, uint16_t *Ph) {
    const AttnShape *s = a->s;
    const float ks = a->keep_scale;
    for (int r = 0; r < rows; r++) {
        const int i = i0 + r, je = row_end(s, i, nk);
        float *row = S + (size_t)r * nk;
        float mx = -INFINITY;
        if (kadd) {
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) {
                const float x = row[j] + kadd[j];
                row[j] = x;
                mx = x > mx ? x : mx;
            }
        } else {
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) mx = row[j] > mx ? row[j] : mx;
        }
        uint16_t *ph = Ph ? Ph + (size_t)r * nk : NULL;
        if (mx == -INFINITY) {
            if (ph) memset(ph, 0, (size_t)nk * sizeof *ph);
            else memset(row, 0, (size_t)nk * sizeof *row);
            lse[i] = -INFINITY;
            continue;
        }
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < je; j++) {
            const float e = cpu_expf_noover(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        const float inv = 1.0f / sum, invk = inv * ks;
        const uint64_t rb = drop_base(s, b, h, i);
        const uint64_t key = a->key;
        const uint32_t thr = a->thr;
        if (ph) {
            if (a->drop) {
#pragma omp simd
                for (int j = 0; j < je; j++)
                    ph[j] = to_bf16(ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * invk : 0.0f);
            } else {
#pragma omp simd
                for (int j = 0; j < je; j++) ph[j] = to_bf16(row[j] * inv);
            }
            if (je < nk) memset(ph + je, 0, (size_t)(nk - je) * sizeof *ph);
        } else {
            if (a->drop) {
#pragma omp simd
                for (int j = 0; j < je; j++)
                    row[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * invk : 0.0f;
            } else {
#pragma omp simd
                for (int j = 0; j < je; j++) row[j] *= inv;
            }
            if (je < nk) memset(row + je, 0, (size_t)(nk - je) * sizeof *row);
        }
        lse[i] = mx + logf(sum);
    }
}

// Per-thread scratch, in floats.  Forward: S, Ph (bf16, half a block), R (shared raw scores),
// fp32 output rows, kadd.  Backward: P, dP, the dropped P (fp32 mode) or Pd and dS in bf16, R,
// Σ_h dS, G rows, kadd, column sums, dq rows [bq, qcols], key-side rows [T, acc_ld].
static size_t align16(size_t n) { return (n + 15) / 16 * 16; }
static size_t fwd_thread_floats(const AttnShape *s, int bq) {
    const size_t blk = align16((size_t)bq * s->T);
    return 3 * blk + align16((size_t)bq * s->v_dim) + align16((size_t)s->T);
}
static size_t bwd_thread_floats(const AttnShape *s, int bq) {
    const size_t blk = align16((size_t)bq * s->T);
    return 5 * blk + align16((size_t)bq * s->v_dim) + 2 * align16((size_t)s->T) +
           align16((size_t)bq * qcols(s)) + align16((size_t)s->T * acc_ld(s));
}
// After the threads' scratch (bf16 mode): G = dO ⊙ out_scale in bf16, then the sequences'
// key-side rows in fp32 between the threads' hand-overs (fp32 mode hands over in dk, dv,
// dkey_bias themselves).
static size_t g_floats(const AttnShape *s) { return align16((size_t)s->B * s->T * s->n_heads * s->v_dim / 2 + 1); }
static size_t glob_floats(const AttnShape *s) { return align16((size_t)s->B * s->T * acc_ld(s)); }

static void fused_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t T = (size_t)s->T, nt = (size_t)cpu_threads(be);
    const int bq = block_rows(s->T);
    // The same saved layout as the reference core: lse [B, n, T], then the unscaled P V.
    *saved = (size_t)s->B * s->n_heads * T + (size_t)s->B * T * s->n_heads * s->v_dim;
    const size_t f = fwd_thread_floats(s, bq), bw = bwd_thread_floats(s, bq);
    *scratch = nt * (f > bw ? f : bw) + (act_bf16(be) ? g_floats(s) + glob_floats(s) : 0);
}

static double attention_flops(const AttnShape *s) {
    return 2.0 * s->B * s->n_heads * (double)s->T * s->T * (s->qk_dim + s->v_dim);
}

static Src src_of(const Backend *be, const Act *x, int ld) {
    if (act_bf16(be)) return (Src){NULL, act_ch(x), ld};
    return (Src){act_cf(x), NULL, ld};
}
static Fused fused_begin(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v) {
    const int bq = block_rows(s->T);
    Fused a = {s, cpu_ctx(be)->gemm, act_bf16(be), bq, (s->T + bq - 1) / bq, src_of(be, q, s->ldq),
               src_of(be, k, s->ldk), src_of(be, v, s->ldv), s->dropout > 0.0f, 1.0f, 0, 0};
    if (a.drop) {
        a.keep_scale = 1.0f / (1.0f - s->dropout);
        a.key = ops_dropout_key(s->seed, s->offset);
        a.thr = ops_dropout_threshold(s->dropout);
    }
    return a;
}

// Head h of query block qb of sequence b: softmax, P V, output scale/shift.  R: the block's
// shared raw scores (NULL: computed here).
static void forward_block(const Fused *a, Act *out, float *saved, int b, int h, int qb, const float *R,
                          float *ws) {
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim, ldo = n * dv;
    const int i0 = qb * a->bq, rows = T - i0 < a->bq ? T - i0 : a->bq;
    const int nk = s->causal ? i0 + rows : T;
    const size_t blk = align16((size_t)a->bq * T);
    float *S = ws, *o = ws + 3 * blk, *kadd = o + align16((size_t)a->bq * dv);
    uint16_t *Ph = a->bf16 ? (uint16_t *)(ws + blk) : NULL;
    if (R) memcpy(S, R, (size_t)rows * nk * sizeof *S);
    else scores(a, b, h, i0, rows, nk, S);
    const int has_kadd = key_add(a, b, h, nk, kadd);
    softmax_block(a, b, h, i0, rows, nk, S, has_kadd ? kadd : NULL, saved + ((size_t)b * n + h) * T, Ph);
    const size_t at = ((size_t)b * T + i0) * ldo + (size_t)h * dv;
    const CpuOperand P = Ph ? h_op(Ph, nk) : f32_op(S, nk), V = rows_op(&a->v, (size_t)b * T, vcol(s, h));
    const int affine = s->out_scale || s->out_shift;
    if (a->bf16 && !affine) {
        gemm(a, 0, 0, rows, dv, nk, 1.0f, P, V, 0.0f, (CpuResult){NULL, act_h(out) + at, ldo});
        return;
    }
    float *po = a->bf16 ? o : act_f(out) + at;
    const int ld_o = a->bf16 ? dv : ldo;
    gemm(a, 0, 0, rows, dv, nk, 1.0f, P, V, 0.0f, f32_res(po, ld_o));
    if (!affine) return;
    // Unscaled P V saved after the lse for d out_scale (same place as the reference core's).
    if (s->out_scale) {
        float *pv = saved + (size_t)s->B * n * T + at;
        for (int r = 0; r < rows; r++) memcpy(pv + (size_t)r * ldo, po + (size_t)r * ld_o, (size_t)dv * sizeof *pv);
    }
    const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
    const float *sh = s->out_shift ? s->out_shift + (size_t)h * dv : NULL;
    for (int r = 0; r < rows; r++) {
        float *x = po + (size_t)r * ld_o;
        if (a->bf16) {
            uint16_t *oh = act_h(out) + at + (size_t)r * ldo;
#pragma omp simd
            for (int c = 0; c < dv; c++) oh[c] = to_bf16((sc ? x[c] * sc[c] : x[c]) + (sh ? sh[c] : 0.0f));
        } else {
#pragma omp simd
            for (int c = 0; c < dv; c++) x[c] = (sc ? x[c] * sc[c] : x[c]) + (sh ? sh[c] : 0.0f);
        }
    }
}

static void fused_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                          Act *out, float *saved, float *scratch) {
    double t0 = cpu_prof_begin(be);
    const Fused a = fused_begin(be, s, q, k, v);
    const int B = s->B, n = s->n_heads, nqb = a.nqb, nt = cpu_threads(be);
    const size_t per_thread = fwd_thread_floats(s, a.bq), blk = align16((size_t)a.bq * s->T);
    if (shares_scores(s)) {
        // sha / mhe_add: one score product per block for all heads.
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int it = 0; it < B * nqb; it++) {
            float *ws = scratch + (size_t)omp_get_thread_num() * per_thread, *R = ws + 2 * blk;
            const int b = it / nqb, qb = it % nqb, i0 = qb * a.bq;
            const int rows = s->T - i0 < a.bq ? s->T - i0 : a.bq;
            scores(&a, b, 0, i0, rows, s->causal ? i0 + rows : s->T, R);
            for (int h = 0; h < n; h++) forward_block(&a, out, saved, b, h, qb, R, ws);
        }
    } else {
        // Blocks nearest the end first: under a causal mask they are the largest, and dynamic
        // scheduling then evens out the tail.
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
        for (int it = 0; it < B * n * nqb; it++) {
            const int qb = nqb - 1 - it % nqb, bh = it / nqb;
            forward_block(&a, out, saved, bh / n, bh % n, qb, NULL,
                          scratch + (size_t)omp_get_thread_num() * per_thread);
        }
    }
    cpu_prof_end(be, OPC_ATTENTION, t0, attention_flops(s));
}

// Columns [c0, c0+w) of a thread's key-side rows (dk, dv or dkey_bias) and where a sequence's
// sum lives between hand-overs: f (row stride ld), fp32; in bf16 mode the last hand-over
// stores f + its rows into h (row stride hld) instead, each element rounded once.
typedef struct {
    int c0, w;
    float *f;
    int ld;
    uint16_t *h;
    int hld;
} Part;

// The thread's rows [0, touched) (rows past it are 0: keys none of its blocks saw) into the
// sequence's sum: the first hand-over writes, later ones add, the last one also stores.
static void hand_over(const float *acc, int ald, int touched, int T, int rank, int last, const Part *p) {
    const int w = p->w;
    for (int i = 0; i < T; i++) {
        const float *x = acc + (size_t)i * ald + p->c0;
        float *f = p->f + (size_t)i * p->ld;
        uint16_t *o = p->h ? p->h + (size_t)i * p->hld : NULL;
        const int have = i < touched;
        if (rank == 0 && last && o) {
            if (have) bf16_store(x, (size_t)w, o);
            else memset(o, 0, (size_t)w * sizeof *o);
        } else if (rank == 0) {
            if (have) memcpy(f, x, (size_t)w * sizeof *f);
            else memset(f, 0, (size_t)w * sizeof *f);
        } else if (!last || !o) {
            if (have)
#pragma omp simd
                for (int c = 0; c < w; c++) f[c] += x[c];
        } else if (have) {
#pragma omp simd
            for (int c = 0; c < w; c++) o[c] = to_bf16(f[c] + x[c]);
        } else {
            bf16_store(f, (size_t)w, o);
        }
    }
}

// What one backward call shares among its threads.
typedef struct {
    const Fused *a;
    const float *lse_all;
    Src G;                 // dO ⊙ out_scale (bf16 mode: a bf16 copy; fp32: dO, scaled per block)
    Act *dq, *dk, *dv, *dkb;
    float *glob;           // bf16 mode: the sequences' key-side sums, [B*T, acc_ld]
    atomic_int *ticket;    // per sequence: how many threads have handed over
} Bwd;

// Thread tid of nth hands over its part of sequence b, after the threads whose first block of
// b comes before its own (a fixed order: the sums are the same whatever the timing).
static void flush_sequence(const Bwd *w, int b, const float *acc, int touched, int tid, int nth) {
    const AttnShape *s = w->a->s;
    const int T = s->T, nqb = w->a->nqb, ald = acc_ld(s);
    const int rank = (tid - (b * nqb) % nth + nth) % nth, count = nqb < nth ? nqb : nth;
    const int last = rank == count - 1;
    Part parts[3];
    int np = 0;
    const size_t r0 = (size_t)b * T;
    if (w->glob) {
        float *g = w->glob + r0 * ald;
        parts[np++] = (Part){0, kcols(s), g, ald, act_h(w->dk) + r0 * s->ldk, s->ldk};
        parts[np++] = (Part){kcols(s), vcols(s), g + kcols(s), ald, act_h(w->dv) + r0 * s->ldv, s->ldv};
        if (w->dkb)
            parts[np++] = (Part){kcols(s) + vcols(s), s->n_heads, g + kcols(s) + vcols(s), ald,
                                 act_h(w->dkb) + r0 * s->n_heads, s->n_heads};
    } else {
        parts[np++] = (Part){0, kcols(s), act_f(w->dk) + r0 * s->ldk, s->ldk, NULL, 0};
        parts[np++] = (Part){kcols(s), vcols(s), act_f(w->dv) + r0 * s->ldv, s->ldv, NULL, 0};
        if (w->dkb)
            parts[np++] = (Part){kcols(s) + vcols(s), s->n_heads, act_f(w->dkb) + r0 * s->n_heads,
                                 s->n_heads, NULL, 0};
    }
    while (atomic_load_explicit(&w->ticket[b], memory_order_acquire) != rank) sched_yield();
    for (int p = 0; p < np; p++) hand_over(acc, ald, touched, T, rank, last, &parts[p]);
    atomic_store_explicit(&w->ticket[b], rank + 1, memory_order_release);
}

// P = exp(S + kadd - lse) on visible keys (0 elsewhere) and, with dropout or in bf16 mode, the
// dropped P as the products read it (Pdh in bf16, or Pdf in fp32).
static void probs_block(const Fused *a, int b, int h, int i0, int rows, int nk, float *P,
                        const float *kadd, const float *lse, float *Pdf, uint16_t *Pdh) {
    const AttnShape *s = a->s;
    const uint64_t key = a->key;
    const uint32_t thr = a->thr;
    const float ks = a->keep_scale;
    for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        const float l = lse[i];
        const int je = l > -INFINITY ? row_end(s, i, nk) : 0;
        float *row = P + (size_t)r * nk;
        if (kadd) {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = cpu_expf_noover(row[j] + kadd[j] - l);
        } else {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = cpu_expf_noover(row[j] - l);
        }
        if (je < nk) memset(row + je, 0, (size_t)(nk - je) * sizeof *row);
        const uint64_t rb = drop_base(s, b, h, i);
        if (Pdh) {
            uint16_t *pd = Pdh + (size_t)r * nk;
            if (a->drop) {
#pragma omp simd
                for (int j = 0; j < je; j++)
                    pd[j] = to_bf16(ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * ks : 0.0f);
            } else {
#pragma omp simd
                for (int j = 0; j < je; j++) pd[j] = to_bf16(row[j]);
            }
            if (je < nk) memset(pd + je, 0, (size_t)(nk - je) * sizeof *pd);
        } else if (a->drop) {
            float *pd = Pdf + (size_t)r * nk;
#pragma omp simd
            for (int j = 0; j < je; j++) pd[j] = ops_dropout_keep_fast(key, rb + j, thr) ? row[j] * ks : 0.0f;
            if (je < nk) memset(pd + je, 0, (size_t)(nk - je) * sizeof *pd);
        }
    }
}

// dP ⊙ keep/(1-p) (the mask read off the dropped P: 0 where dropped or where P = 0, and there
// dS = 0 whatever dP is), then dS = P ⊙ (dP - rowsum(P ⊙ dP)) into dP (fp32, when df) and dSh.
static void ds_block(const Fused *a, int rows, int nk, const float *P, float *dP, const float *Pdf,
                     const uint16_t *Pdh, int df, uint16_t *dSh) {
    const float inv = a->keep_scale;
    for (int r = 0; r < rows; r++) {
        const float *pr = P + (size_t)r * nk;
        float *gr = dP + (size_t)r * nk;
        if (a->drop && Pdh) {
            const uint16_t *pdr = Pdh + (size_t)r * nk;
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pdr[j] != 0 ? gr[j] * inv : 0.0f;
        } else if (a->drop) {
            const float *pdr = Pdf + (size_t)r * nk;
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pdr[j] != 0.0f ? gr[j] * inv : 0.0f;
        }
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < nk; j++) dot += (double)pr[j] * gr[j];
        const float fd = (float)dot;
        if (dSh && df) {
            uint16_t *dr = dSh + (size_t)r * nk;
#pragma omp simd
            for (int j = 0; j < nk; j++) {
                const float d = pr[j] * (gr[j] - fd);
                gr[j] = d;
                dr[j] = to_bf16(d);
            }
        } else if (dSh) {
            uint16_t *dr = dSh + (size_t)r * nk;
#pragma omp simd
            for (int j = 0; j < nk; j++) dr[j] = to_bf16(pr[j] * (gr[j] - fd));
        } else {
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pr[j] * (gr[j] - fd);
        }
    }
}

// Query block qb of sequence b, every head: dq rows stored; dk, dv, dkey_bias added to the
// thread's key-side rows acc (rows [0, *touched) valid; grown and zeroed here).
static void backward_block(const Bwd *w, int b, int qb, float *ws, float *acc, int *touched) {
    const Fused *a = w->a;
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim, dkd = s->qk_dim, ldo = n * dv, bf = a->bf16;
    const int i0 = qb * a->bq, rows = T - i0 < a->bq ? T - i0 : a->bq;
    const int nk = s->causal ? i0 + rows : T, ald = acc_ld(s), qc = qcols(s);
    const int shared = shares_scores(s);
    const size_t blk = align16((size_t)a->bq * T), r0 = (size_t)b * T;
    float *P = ws, *dP = ws + blk, *Pdf = ws + 2 * blk, *R = ws + 3 * blk, *dSs = ws + 4 * blk;
    float *G = ws + 5 * blk, *kadd = G + align16((size_t)a->bq * dv), *cs = kadd + align16((size_t)T);
    float *dqa = cs + align16((size_t)T);
    uint16_t *Pdh = bf ? (uint16_t *)Pdf : NULL, *dSh = bf ? Pdh + blk : NULL;
    if (*touched < nk) {
        memset(acc + (size_t)*touched * ald, 0, (size_t)(nk - *touched) * ald * sizeof *acc);
        *touched = nk;
    }
    memset(dqa, 0, (size_t)rows * qc * sizeof *dqa);
    if (shared) {
        scores(a, b, 0, i0, rows, nk, R);
        memset(dSs, 0, (size_t)rows * nk * sizeof *dSs);
    }
    // fp32 dS is needed for Σ_h dS, the key-bias column sums, or as the fp32 products' operand.
    const int df = !bf || shared || w->dkb;
    for (int h = 0; h < n; h++) {
        const int has_kadd = key_add(a, b, h, nk, kadd);
        if (shared) memcpy(P, R, (size_t)rows * nk * sizeof *P);
        else scores(a, b, h, i0, rows, nk, P);
        probs_block(a, b, h, i0, rows, nk, P, has_kadd ? kadd : NULL, w->lse_all + ((size_t)b * n + h) * T,
                    Pdf, Pdh);
        CpuOperand Gop;
        if (bf) {
            Gop = rows_op(&w->G, r0 + i0, (size_t)h * dv);
        } else if (s->out_scale) {
            const float *dO = w->G.f + (r0 + i0) * ldo + (size_t)h * dv, *sc = s->out_scale + (size_t)h * dv;
            for (int r = 0; r < rows; r++)
#pragma omp simd
                for (int c = 0; c < dv; c++) G[(size_t)r * dv + c] = dO[(size_t)r * ldo + c] * sc[c];
            Gop = f32_op(G, dv);
        } else {
            Gop = rows_op(&w->G, r0 + i0, (size_t)h * dv);
        }
        const CpuOperand Pd = Pdh ? h_op(Pdh, nk) : f32_op(a->drop ? Pdf : P, nk);
        gemm(a, 1, 0, nk, dv, rows, 1.0f, Pd, Gop, 1.0f, f32_res(acc + kcols(s) + vcol(s, h), ald));
        gemm(a, 0, 1, rows, nk, dv, 1.0f, Gop, rows_op(&a->v, r0, vcol(s, h)), 0.0f, f32_res(dP, nk));
        ds_block(a, rows, nk, P, dP, Pdf, Pdh, df, shared ? NULL : dSh);
        if (w->dkb) {
            memset(cs, 0, (size_t)nk * sizeof *cs);
            for (int r = 0; r < rows; r++) {
                const float *gr = dP + (size_t)r * nk;
#pragma omp simd
                for (int j = 0; j < nk; j++) cs[j] += gr[j];
            }
            float *col = acc + kcols(s) + vcols(s) + h;
            for (int j = 0; j < nk; j++) col[(size_t)j * ald] += cs[j];
        }
        if (shared) {
            const size_t e = (size_t)rows * nk;
#pragma omp simd
            for (size_t x = 0; x < e; x++) dSs[x] += dP[x];
            continue;
        }
        const CpuOperand dS = dSh ? h_op(dSh, nk) : f32_op(dP, nk);
        gemm(a, 0, 0, rows, dkd, nk, s->scale, dS, rows_op(&a->k, r0, kcol(s, h)), 1.0f, f32_res(dqa + qcol(s, h), qc));
        gemm(a, 1, 0, nk, dkd, rows, s->scale, dS, rows_op(&a->q, r0 + i0, qcol(s, h)), 1.0f,
             f32_res(acc + kcol(s, h), ald));
    }
    if (shared) {
        CpuOperand dS = f32_op(dSs, nk);
        if (bf) {
            bf16_store(dSs, (size_t)rows * nk, dSh);
            dS = h_op(dSh, nk);
        }
        gemm(a, 0, 0, rows, dkd, nk, s->scale, dS, rows_op(&a->k, r0, 0), 1.0f, f32_res(dqa, qc));
        gemm(a, 1, 0, nk, dkd, rows, s->scale, dS, rows_op(&a->q, r0 + i0, 0), 1.0f, f32_res(acc, ald));
    }
    for (int r = 0; r < rows; r++) {
        const size_t at = (r0 + i0 + r) * s->ldq;
        if (bf) bf16_store(dqa + (size_t)r * qc, (size_t)qc, act_h(w->dq) + at);
        else memcpy(act_f(w->dq) + at, dqa + (size_t)r * qc, (size_t)qc * sizeof(float));
    }
}

static void fused_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                           const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv_out,
                           Act *dkey_bias, float *dout_scale, float *dout_shift, float *scratch) {
    double t0 = cpu_prof_begin(be);
    const Fused a = fused_begin(be, s, q, k, v);
    const int B = s->B, T = s->T, n = s->n_heads, ldo = n * s->v_dim, nt = cpu_threads(be), nqb = a.nqb;
    const int bf = act_bf16(be);
    const size_t per_thread = bwd_thread_floats(s, a.bq), blk = align16((size_t)a.bq * T);
    float *tail = scratch + (size_t)nt * per_thread;
    Bwd w = {&a, saved, src_of(be, dout, ldo), dq, dk, dv_out, dkey_bias, bf ? tail + g_floats(s) : NULL, NULL};
    if (bf && s->out_scale) {
        // G = dO ⊙ out_scale once for all heads, in bf16 (the products' operand).
        uint16_t *g = (uint16_t *)tail;
        const float *sc = s->out_scale;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * ldo >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < B * T; r++) {
            const uint16_t *d = act_ch(dout) + (size_t)r * ldo;
            uint16_t *o = g + (size_t)r * ldo;
#pragma omp simd
            for (int c = 0; c < ldo; c++) o[c] = to_bf16(from_bf16(d[c]) * sc[c]);
        }
        w.G = (Src){NULL, g, ldo};
    }
    w.ticket = mhe_malloc((size_t)B * sizeof *w.ticket);
    for (int b = 0; b < B; b++) atomic_init(&w.ticket[b], 0);
#pragma omp parallel num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        float *ws = scratch + (size_t)tid * per_thread;
        float *acc = ws + 5 * blk + align16((size_t)a.bq * s->v_dim) + 2 * align16((size_t)T) +
                     align16((size_t)a.bq * qcols(s));
        int cur = -1, touched = 0;
        // Round-robin: the blocks of a sequence spread over the team even when B is small.
        for (int it = tid; it < B * nqb; it += nth) {
            const int b = it / nqb;
            if (b != cur) {
                if (cur >= 0) flush_sequence(&w, cur, acc, touched, tid, nth);
                cur = b;
                touched = 0;
            }
            backward_block(&w, b, it % nqb, ws, acc, &touched);
        }
        if (cur >= 0) flush_sequence(&w, cur, acc, touched, tid, nth);
    }
    free(w.ticket);
    cpu_attention_affine_grads(be, s, saved + (size_t)B * n * T, dout, dout_scale, dout_shift);
    // Counted as the reference core counts it (twice the forward's products plus the recomputed
    // scores, all T x T even when causal), so the two report comparable GFLOP/s.
    cpu_prof_end(be, OPC_ATTENTION, t0, 2.0 * attention_flops(s) + 2.0 * B * n * (double)T * T * s->qk_dim);
}

void cpu_install_attention(Backend *be) {
    const char *e = getenv("MHE_CPU_ATTN_BLOCK");
    block_override = e && atoi(e) > 0 ? atoi(e) : -1;
    const char *which = getenv("MHE_CPU_ATTENTION");
    if (which && strcmp(which, "ref") == 0) {
        cpu_install_attention_ref(be);
        return;
    }
    if (which && *which && strcmp(which, "fused") != 0)
        mhe_fatal("MHE_CPU_ATTENTION=%s: expected fused or ref", which);
    be->attention_sizes = fused_sizes;
    be->attention_forward = fused_forward;
    be->attention_backward = fused_backward;
}

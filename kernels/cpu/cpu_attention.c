// The fused attention core (ops.h AttnShape) of the CPU backend, the default in bf16 runs
// (MHE_CPU_ATTENTION=fused|ref chooses; the reference core of cpu_attention_ref.c is its test
// oracle and the fp32 default).
//
// Query rows go in blocks of bq rows (block_rows: bq * T fp32 scores = 256 KiB) and each block
// holds a full row of keys, [bq, T] (causal: [bq, i1], the keys up to the block's last row, so
// blocks above the diagonal are never computed).  No T x T matrix exists; the per-thread blocks
// stay in L2.  A full row rather than an online softmax over key tiles: the row maximum and sum
// are the reference core's exactly (no rescaling of partial outputs), the backward's
// rowsum(P ⊙ dP) comes from the same block (or, under AMX with long rows, as G · O: d_from_o),
// and at the project's T (<= 2048) a row of keys fits in cache anyway.  Products go through
// cpu_gemm_ex per block (bf16 operands in bf16 mode: the activations as they are, P, dropped P
// and dS written in bf16 by the element loops).
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

#include "common/env.h"
#include "common/error.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_attention.h"
#include "kernels/cpu/cpu_attention_fused.h"
#include "kernels/cpu/cpu_bf16.h"
#include "kernels/cpu/cpu_internal.h"

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

static int qcols(const AttnShape *s) { return s->q_heads * s->qk_dim; }
static int kcols(const AttnShape *s) { return s->k_heads * s->qk_dim; }
static int vcols(const AttnShape *s) { return s->v_heads * s->v_dim; }
// The thread's key-side gradient rows: dk | dv | dkey_bias (one column per head).
static int acc_ld(const AttnShape *s) { return kcols(s) + vcols(s) + s->n_heads; }
static size_t align16(size_t n) { return (n + 15) / 16 * 16; }
// A block's fp32 rows (scores, P, dP): T + 16 floats apart under AMX, whose tile stores into
// rows 2 KiB apart (T = 512) hit the same L1 sets (a 128 x 512 x 32 score product: 9.8 µs with
// rows nk apart, 6.2 with the padding); nk apart for oneDNN, which takes its fast path only for
// a dense destination.
#define ROW_PAD 16
static size_t blk_floats(const AttnShape *s, int bq) { return align16((size_t)bq * (s->T + ROW_PAD)); }
static int block_ld(const Fused *a, int nk) { return a->amx ? a->s->T + ROW_PAD : nk; }
static int shares_scores(const AttnShape *s) { return s->q_heads == 1 && s->k_heads == 1 && s->n_heads > 1; }

static CpuResult f32_res(float *x, int ld) { return (CpuResult){x, NULL, ld}; }

static void gemm(const Fused *a, int ta, int tb, int M, int N, int K, float alpha, CpuOperand A,
                 CpuOperand B, float beta, CpuResult C) {
    cpu_gemm_ex(a->g, a->bf16, ta, tb, M, N, K, alpha, A, B, NULL, beta, C);
}

// bf16 mode: the thread's dense copies of the products' operands: the query block, K and V of
// one sequence's head (kept while consecutive items use the same one: tag = b * heads + head,
// -1 none) and the block's G.  oneDNN 2.6 takes its AMX / AVX-512-bf16 brgemm kernels only for
// a dense B operand (and destination); head slices of q, k, v (row stride heads * dim) sent it
// to its bf16 gemm:jit path, 2-4x slower at these shapes.  A copy costs T * dim per item, 1/bq
// of the item's products.  fp32 mode reads the slices where they are: there oneDNN's gemm:jit
// (sgemm) on strided operands beat its fp32 brgemm on dense copies.
// Under AMX (bf16, the avx512 level) the forward's k holds K^T packed for the scores and v holds
// V packed for P V: cpu_amx.h's tiles, read from the activations directly (each T * dim bf16,
// half the fp32 room these regions have).  The backward visits every head of a query block, so
// its packs cover a whole sequence (seq: its index, -1 none): K^T (scores) and K (dQ) of every
// K head, V^T (dP) of every V head, after the rest.
typedef struct {
    void *q, *k, *v, *g;
    int ktag, vtag;
    uint16_t *kt_all, *k_all, *vt_all;
    int seq;
} Packs;
static size_t seq_pack_elems(const AttnShape *s) { return (size_t)s->T * (2 * (size_t)kcols(s) + vcols(s)); }
static size_t pack_floats(const AttnShape *s, int bq) {
    return align16((size_t)bq * s->qk_dim) + align16((size_t)s->T * s->qk_dim) +
           align16((size_t)s->T * s->v_dim) + align16((size_t)bq * s->v_dim) + align16(seq_pack_elems(s) / 2 + 1);
}
static Packs packs_at(const AttnShape *s, int bq, float *p) {
    Packs k = {p, 0, 0, 0, -1, -1, NULL, NULL, NULL, -1};
    k.k = p + align16((size_t)bq * s->qk_dim);
    k.v = (float *)k.k + align16((size_t)s->T * s->qk_dim);
    k.g = (float *)k.v + align16((size_t)s->T * s->v_dim);
    k.kt_all = (uint16_t *)((float *)k.g + align16((size_t)bq * s->v_dim));
    k.k_all = k.kt_all + (size_t)s->T * kcols(s);
    k.vt_all = k.k_all + (size_t)s->T * kcols(s);
    return k;
}
// rows x cols of x from absolute row r0, column col, into dst (row stride cols).
static void pack_rows(const Src *x, size_t r0, size_t col, int rows, int cols, void *dst) {
    for (int r = 0; r < rows; r++) {
        if (x->h)
            memcpy((uint16_t *)dst + (size_t)r * cols, x->h + (r0 + r) * x->ld + col, (size_t)cols * sizeof(uint16_t));
        else
            memcpy((float *)dst + (size_t)r * cols, x->f + (r0 + r) * x->ld + col, (size_t)cols * sizeof(float));
    }
}
// rows x cols of x from absolute row r0, column col, as a product operand: bf16, packed into
// dst (unless *tag already names it); fp32, where it is.
static CpuOperand operand(const Src *x, size_t r0, size_t col, int rows, int cols, void *dst, int *tag,
                          int want) {
    if (!x->h) return f32_op(x->f + r0 * x->ld + col, x->ld);
    if (!tag || *tag != want) pack_rows(x, r0, col, rows, cols, dst);
    if (tag) *tag = want;
    return h_op((const uint16_t *)dst, cols);
}
// K (or V) of head h of sequence b, all T rows (causal blocks read a prefix).
static CpuOperand k_op(const Fused *a, Packs *pk, int b, int h) {
    const AttnShape *s = a->s;
    return operand(&a->k, (size_t)b * s->T, kcol(s, h), s->T, s->qk_dim, pk->k, &pk->ktag,
                   b * s->k_heads + h / (s->n_heads / s->k_heads));
}
static CpuOperand v_op(const Fused *a, Packs *pk, int b, int h) {
    const AttnShape *s = a->s;
    return operand(&a->v, (size_t)b * s->T, vcol(s, h), s->T, s->v_dim, pk->v, &pk->vtag,
                   b * s->v_heads + h / (s->n_heads / s->v_heads));
}

// AMX packs of head h of sequence b (kept while consecutive items use the same head).
static const uint16_t *amx_pack(const Src *x, size_t r0, size_t col, int T, int dim, int bt, uint16_t *dst, int *tag,
                                int want) {
    if (*tag != want) {
        const uint16_t *at = x->h + r0 * x->ld + col;
        if (bt) cpu_amx_pack_bt(at, (size_t)x->ld, T, dim, dst);
        else cpu_amx_pack_b(at, (size_t)x->ld, T, dim, dst);
        *tag = want;
    }
    return dst;
}
static int k_tag(const AttnShape *s, int b, int h) { return b * s->k_heads + h / (s->n_heads / s->k_heads); }
static int v_tag(const AttnShape *s, int b, int h) { return b * s->v_heads + h / (s->n_heads / s->v_heads); }
static int k_group(const AttnShape *s, int h) { return h / (s->n_heads / s->k_heads); }
static const uint16_t *amx_kt(const Fused *a, Packs *pk, int b, int h) {
    const AttnShape *s = a->s;
    if (pk->seq == b) return pk->kt_all + (size_t)k_group(s, h) * s->T * s->qk_dim;
    return amx_pack(&a->k, (size_t)b * s->T, kcol(s, h), s->T, s->qk_dim, 1, pk->k, &pk->ktag, k_tag(s, b, h));
}
// The forward's V; the backward's K and V^T (amx_pack_sequence has packed the sequence).
static const uint16_t *amx_v(const Fused *a, Packs *pk, int b, int h) {
    const AttnShape *s = a->s;
    return amx_pack(&a->v, (size_t)b * s->T, vcol(s, h), s->T, s->v_dim, 0, pk->v, &pk->vtag, v_tag(s, b, h));
}
static const uint16_t *amx_k(const Fused *a, const Packs *pk, int h) {
    return pk->k_all + (size_t)k_group(a->s, h) * a->s->T * a->s->qk_dim;
}
#ifdef FUSED_AMX
static int v_group(const AttnShape *s, int h) { return h / (s->n_heads / s->v_heads); }
static const uint16_t *amx_vt(const Fused *a, const Packs *pk, int h) {
    return pk->vt_all + (size_t)v_group(a->s, h) * a->s->T * a->s->v_dim;
}
#endif
// The backward's packs of sequence b, every head, unless they are already there.
static void amx_pack_sequence(const Fused *a, Packs *pk, int b) {
    const AttnShape *s = a->s;
    if (pk->seq == b) return;
    const size_t r0 = (size_t)b * s->T, kd = (size_t)s->T * s->qk_dim, vd = (size_t)s->T * s->v_dim;
    for (int g = 0; g < s->k_heads; g++) {
        const uint16_t *at = a->k.h + r0 * a->k.ld + (size_t)g * s->qk_dim;
        cpu_amx_pack_bt(at, (size_t)a->k.ld, s->T, s->qk_dim, pk->kt_all + g * kd);
        cpu_amx_pack_b(at, (size_t)a->k.ld, s->T, s->qk_dim, pk->k_all + g * kd);
    }
    for (int g = 0; g < s->v_heads; g++)
        cpu_amx_pack_bt(a->v.h + r0 * a->v.ld + (size_t)g * s->v_dim, (size_t)a->v.ld, s->T, s->v_dim,
                        pk->vt_all + g * vd);
    pk->seq = b;
}

// Raw scores of query rows [i0, i0+rows) of sequence b against keys [0, nk): S [rows, nk], rows
// block_ld apart.
// Returns the block's Q operand (the backward's dK reads it).
// Under AMX: S = Q K^T unscaled (a->in_scale applies s->scale in the element passes).
static CpuOperand scores(const Fused *a, Packs *pk, int b, int h, int i0, int rows, int nk, float *S) {
    const AttnShape *s = a->s;
    const int d = s->qk_dim;
    const CpuOperand Q = operand(&a->q, (size_t)b * s->T + i0, qcol(s, h), rows, d, pk->q, NULL, 0);
    if (a->amx) {
        cpu_amx_gemm(rows, nk, d, 1.0f, Q.h, (size_t)Q.ld, amx_kt(a, pk, b, h), d / 32, 0, S, (size_t)block_ld(a, nk));
        return Q;
    }
    gemm(a, 0, 1, rows, nk, d, s->scale, Q, k_op(a, pk, b, h), 0.0f, f32_res(S, nk));
    return Q;
}

// kadd[j], j < nk: head h's bias of key j, -inf where key_mask hides it, else 0 (one strided
// gather per block instead of one per score; the loops add it unconditionally).
static void key_add(const Fused *a, int b, int h, int nk, float *kadd) {
    const AttnShape *s = a->s;
    const int32_t *km = s->key_mask ? s->key_mask + (size_t)b * s->T : NULL;
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
}

// Per-thread scratch, in floats.  Forward: S, Ph (bf16, half a block), R (shared raw scores),
// fp32 output rows, kadd, the rows' scales.  Backward: P, dP, the dropped P (fp32 mode) or Pd and dS in bf16, R,
// Σ_h dS, G rows, kadd, column sums, dq rows [bq, qcols], key-side rows [T, acc_ld].
static size_t fwd_thread_floats(const AttnShape *s, int bq) {
    const size_t blk = blk_floats(s, bq);
    return 3 * blk + align16((size_t)bq * s->v_dim) + align16((size_t)s->T) + align16((size_t)bq);
}
// Under AMX, after the key-side rows: the dropped P and dS packed as B operands (bf16, a block
// each), then Q^T and G^T of the block (bf16 [dim, bq]).
static size_t bwd_thread_floats(const AttnShape *s, int bq) {
    const size_t blk = blk_floats(s, bq);
    return 5 * blk + align16((size_t)bq * s->v_dim) + 2 * align16((size_t)s->T) +
           align16((size_t)bq * qcols(s)) + align16((size_t)s->T * acc_ld(s)) + blk +
           align16((size_t)bq * (s->qk_dim + s->v_dim) / 2 + 1);
}
// After the threads' scratch (bf16 mode): G = dO ⊙ out_scale in bf16, then the sequences'
// key-side rows in fp32 between the threads' hand-overs (fp32 mode hands over in dk, dv,
// dkey_bias themselves).
static size_t g_floats(const AttnShape *s) { return align16((size_t)s->B * s->T * s->n_heads * s->v_dim / 2 + 1); }
static size_t glob_floats(const AttnShape *s) { return align16((size_t)s->B * s->T * acc_ld(s)); }

// Forward or backward blocks, then the packs.
static size_t core_floats(const AttnShape *s, int bq) {
    const size_t f = fwd_thread_floats(s, bq), bw = bwd_thread_floats(s, bq);
    return f > bw ? f : bw;
}
static size_t thread_floats(const AttnShape *s, int bq) { return core_floats(s, bq) + pack_floats(s, bq); }
// Where the dropout mask's words start in `saved`, in floats (one word per float).
static size_t mask_at(const AttnShape *s) {
    return (size_t)s->B * s->n_heads * s->T + (size_t)s->B * s->T * s->n_heads * s->v_dim;
}
static void fused_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t T = (size_t)s->T, nt = (size_t)cpu_threads(be);
    const int bq = block_rows(s->T);
    // The reference core's saved layout, lse [B, n, T] then the unscaled P V, and after them the
    // dropout mask's bits (whatever s->dropout: the sizes are asked once for every call).
    *saved = mask_at(s) + (size_t)s->B * s->n_heads * T * mask_words(s->T);
    *scratch = nt * thread_floats(s, bq) + (act_bf16(be) ? g_floats(s) + glob_floats(s) : 0);
}

static Fused fused_begin(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v) {
    const int bq = block_rows(s->T);
    Fused a = {s, cpu_ctx(be)->gemm, act_bf16(be), bq, (s->T + bq - 1) / bq, src_of(be, q, s->ldq),
               src_of(be, k, s->ldk), src_of(be, v, s->ldv), !s->key_bias && !s->key_mask, s->dropout > 0.0f,
               1.0f, 0, 0, 0, 1.0f, 0};
#ifdef FUSED_AMX
    // AMX needs whole tiles: rows and keys in 32s (every block's, causal prefixes too) and
    // head widths in 32s; any other shape keeps oneDNN.
    a.amx = a.bf16 && cpu_amx_available() && s->T % 32 == 0 && bq % 32 == 0 && s->qk_dim % 32 == 0 &&
            s->v_dim % 32 == 0;
#endif
    if (a.amx) a.in_scale = s->scale;
    // O costs 12 v_dim bytes of memory traffic a row (the forward's store, the backward's read);
    // the pass it saves, 12 T bytes of L2 traffic.  Measured on an AMX Xeon (bench_attention):
    // T = 512, d = 32 gained; T = 128, d = 64 lost.
    a.d_from_o = a.amx && s->T >= 8 * s->v_dim;
    if (a.drop) {
        a.keep_scale = 1.0f / (1.0f - s->dropout);
        a.key = ops_dropout_key(s->seed, s->offset);
        a.thr = ops_dropout_threshold(s->dropout);
    }
    return a;
}

// Prefetch for writing: `bytes` from p in each of `rows` rows ld bytes apart.
static void prefetch_rows(const char *p, size_t ld, int rows, size_t bytes) {
    for (int r = 0; r < rows; r++)
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + (size_t)r * ld + o, 1, 3);
}

// Head h of query block qb of sequence b: softmax, P V, output scale/shift.  R: the block's
// shared raw scores (NULL: computed here).
static void forward_block(const Fused *a, Act *out, float *saved, int b, int h, int qb, const float *R,
                          float *ws, Packs *pk) {
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim, ldo = n * dv;
    const int i0 = qb * a->bq, rows = T - i0 < a->bq ? T - i0 : a->bq;
    const int nk = s->causal ? i0 + rows : T;
    const size_t blk = blk_floats(s, a->bq);
    float *S = ws, *o = ws + 3 * blk, *kadd = o + align16((size_t)a->bq * dv), *rs = kadd + align16((size_t)T);
    uint16_t *Ph = a->bf16 ? (uint16_t *)(ws + blk) : NULL;
    // The rows this block stores at its end (the head's columns of out, and of the saved P V)
    // are each a line or two in a different row: fetched now for writing, under the block's
    // products, instead of one read-for-ownership miss per row at the stores (tiny mhe_mul at
    // T = 128 on an AMX Xeon: the core's GFLOP/s 219-229 -> 245-249).
    const size_t at = ((size_t)b * T + i0) * ldo + (size_t)h * dv, es = a->bf16 ? 2 : 4;
    prefetch_rows((const char *)out + at * es, (size_t)ldo * es, rows, (size_t)dv * es);
    const int save_pv = s->out_scale || a->d_from_o;
    if (save_pv) prefetch_rows((const char *)(saved + (size_t)s->B * n * T + at), (size_t)ldo * 4, rows, (size_t)dv * 4);
    if (!R) scores(a, pk, b, h, i0, rows, nk, S);
    key_add(a, b, h, nk, kadd);
    uint32_t *mask = a->drop ? (uint32_t *)(saved + mask_at(s)) + mask_row(s, b, h, i0) : NULL;
    softmax_block(a, b, h, i0, rows, nk, block_ld(a, nk), R ? R : S, S, kadd, saved + ((size_t)b * n + h) * T, Ph, rs,
                  mask);
    // Into the dense block o, then copied into the head's columns: a strided destination would
    // send oneDNN to its slower gemm:jit path as a strided B operand does.
    if (a->amx) {
        cpu_amx_gemm(rows, dv, nk, 1.0f, Ph, (size_t)nk, amx_v(a, pk, b, h), T / 32, 0, o, (size_t)dv);
    } else {
        const CpuOperand P = Ph ? h_op(Ph, nk) : f32_op(S, nk), V = v_op(a, pk, b, h);
        gemm(a, 0, 0, rows, dv, nk, 1.0f, P, V, 0.0f, f32_res(o, dv));
    }
    // The softmax's 1 / Σ e (and 1/(1-p)) per row.
    for (int r = 0; r < rows; r++) {
        float *x = o + (size_t)r * dv;
        const float f = rs[r];
#pragma omp simd
        for (int c = 0; c < dv; c++) x[c] *= f;
    }
    // The unscaled P V saved after the lse: for d out_scale (the reference core's place), and
    // for the backward's rowsum(P ⊙ dP') = G · (P V) (d_from_o).
    if (save_pv) {
        float *pv = saved + (size_t)s->B * n * T + at;
        for (int r = 0; r < rows; r++) memcpy(pv + (size_t)r * ldo, o + (size_t)r * dv, (size_t)dv * sizeof *pv);
    }
    const int affine = s->out_scale || s->out_shift;
    if (!affine) {
        for (int r = 0; r < rows; r++) {
            if (a->bf16) bf16_store(o + (size_t)r * dv, (size_t)dv, act_h(out) + at + (size_t)r * ldo);
            else memcpy(act_f(out) + at + (size_t)r * ldo, o + (size_t)r * dv, (size_t)dv * sizeof *o);
        }
        return;
    }
    const float *sc = s->out_scale ? s->out_scale + (size_t)h * dv : NULL;
    const float *sh = s->out_shift ? s->out_shift + (size_t)h * dv : NULL;
    for (int r = 0; r < rows; r++) {
        const float *x = o + (size_t)r * dv;
        if (a->bf16) {
            uint16_t *oh = act_h(out) + at + (size_t)r * ldo;
#pragma omp simd
            for (int c = 0; c < dv; c++) oh[c] = to_bf16((sc ? x[c] * sc[c] : x[c]) + (sh ? sh[c] : 0.0f));
        } else {
            float *of = act_f(out) + at + (size_t)r * ldo;
#pragma omp simd
            for (int c = 0; c < dv; c++) of[c] = (sc ? x[c] * sc[c] : x[c]) + (sh ? sh[c] : 0.0f);
        }
    }
}

static void fused_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                          Act *out, float *saved, float *scratch) {
    double t0 = cpu_prof_begin(be);
    const Fused a = fused_begin(be, s, q, k, v);
    const int B = s->B, n = s->n_heads, nqb = a.nqb, nt = cpu_threads(be);
    const size_t per_thread = thread_floats(s, a.bq), blk = blk_floats(s, a.bq);
    const int shared = shares_scores(s), items = shared ? B * nqb : B * n * nqb;
#pragma omp parallel num_threads(nt) if (attention_flops(s) >= CPU_PARALLEL_MIN)
    {
        float *ws = scratch + (size_t)omp_get_thread_num() * per_thread;
        Packs pk = packs_at(s, a.bq, ws + core_floats(s, a.bq));
        // Blocks nearest the end first: under a causal mask they are the largest, and dynamic
        // scheduling then evens out the tail.
#pragma omp for schedule(dynamic)
        for (int it = 0; it < items; it++) {
            const int qb = nqb - 1 - it % nqb;
            if (shared) {
                // sha / mhe_add: one score product per block for all heads.
                const int b = it / nqb, i0 = qb * a.bq, rows = s->T - i0 < a.bq ? s->T - i0 : a.bq;
                float *R = ws + 2 * blk;
                scores(&a, &pk, b, 0, i0, rows, s->causal ? i0 + rows : s->T, R);
                for (int h = 0; h < n; h++) forward_block(&a, out, saved, b, h, qb, R, ws, &pk);
            } else {
                const int bh = it / nqb;
                forward_block(&a, out, saved, bh / n, bh % n, qb, NULL, ws, &pk);
            }
        }
    }
    cpu_prof_end(be, OPC_ATTENTION, t0, attention_flops(s));
}

// Columns [c0, c0+w) of a thread's key-side rows (dk, dv or dkey_bias) and where a sequence's
// sum lives between hand-overs: f (row stride ld), fp32; in bf16 mode the last hand-over
// stores f + its rows into h (row stride hld) instead, each element rounded once.
typedef struct {
    const float *x;   // the thread's rows of this part, dense [T, w] (xt: [w, T], AMX's dK^T, dV^T)
    int w, xt;
    float *f;
    int ld;
    uint16_t *h;
    int hld;
} Part;

// The thread's rows [0, touched) (rows past it are 0: keys none of its blocks saw) into the
// sequence's sum: the first hand-over writes, later ones add, the last one also stores.
// rows: HAND_ROWS x w floats, where a transposed part's rows are gathered HAND_ROWS at a time.
#define HAND_ROWS 16
static void hand_over(int touched, int T, int rank, int last, const Part *p, float *rows) {
    const int w = p->w;
    for (int i = 0; i < T; i++) {
        const float *x = p->x + (size_t)i * w;
        if (p->xt && i < touched) {
            const int r = i % HAND_ROWS;
            if (r == 0)
                cpu_amx_transpose_f32(p->x + i, (size_t)T, w, touched - i < HAND_ROWS ? touched - i : HAND_ROWS, rows,
                                      (size_t)w);
            x = rows + (size_t)r * w;
        }
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
// Part c of the key-side columns (dk heads, then dv heads, then dkey_bias), columns [c0, c0+w)
// of acc_ld, into p: the thread's rows (dense per head: oneDNN writes them as dense
// destinations), and where the sum goes.
static Part part_of(const Bwd *w, int b, const float *acc, int c) {
    const AttnShape *s = w->a->s;
    const int T = s->T, kh = s->k_heads, vh = s->v_heads, dk = s->qk_dim, dv = s->v_dim, ald = acc_ld(s);
    const size_t r0 = (size_t)b * T;
    int c0, wd, ld;
    const float *x;
    float *f;
    uint16_t *h = NULL;
    if (c < kh) {
        c0 = c * dk, wd = dk, x = acc + (size_t)c * T * dk;
        f = w->glob ? NULL : act_f(w->dk) + r0 * s->ldk + c0, ld = s->ldk;
        if (w->glob) h = act_h(w->dk) + r0 * s->ldk + c0;
    } else if (c < kh + vh) {
        const int g = c - kh;
        c0 = kcols(s) + g * dv, wd = dv, x = acc + (size_t)kh * T * dk + (size_t)g * T * dv;
        f = w->glob ? NULL : act_f(w->dv) + r0 * s->ldv + (size_t)g * dv, ld = s->ldv;
        if (w->glob) h = act_h(w->dv) + r0 * s->ldv + (size_t)g * dv;
    } else {
        c0 = kcols(s) + vcols(s), wd = s->n_heads, x = acc + (size_t)T * (kcols(s) + vcols(s));
        f = w->glob ? NULL : act_f(w->dkb) + r0 * s->n_heads, ld = s->n_heads;
        if (w->glob) h = act_h(w->dkb) + r0 * s->n_heads;
    }
    const int xt = w->a->amx && c < kh + vh;
    if (w->glob) {
        f = w->glob + r0 * ald + c0;
        return (Part){x, wd, xt, f, ald, h, c < kh ? s->ldk : c < kh + vh ? s->ldv : s->n_heads};
    }
    return (Part){x, wd, xt, f, ld, NULL, 0};
}

// rank: the thread's place among the count threads with blocks of sequence b.
static void flush_sequence(const Bwd *w, int b, const float *acc, int touched, int rank, int count) {
    const AttnShape *s = w->a->s;
    const int T = s->T;
    const int last = rank == count - 1, parts = s->k_heads + s->v_heads + (w->dkb != NULL);
    float *row = w->a->amx ? mhe_malloc((size_t)HAND_ROWS * (s->qk_dim > s->v_dim ? s->qk_dim : s->v_dim) * sizeof *row)
                           : NULL;
    while (atomic_load_explicit(&w->ticket[b], memory_order_acquire) != rank) sched_yield();
    for (int c = 0; c < parts; c++) {
        const Part p = part_of(w, b, acc, c);
        hand_over(touched, T, rank, last, &p, row);
    }
    atomic_store_explicit(&w->ticket[b], rank + 1, memory_order_release);
    free(row);
}

#ifdef FUSED_AMX
// D[r] = Σ_c g[r][c] o[r][c] over rows of bf16 g and fp32 o.
static void row_dots(const uint16_t *g, int gld, const float *o, size_t old, int rows, int dv, float *D) {
    for (int r = 0; r < rows; r++) {
        const uint16_t *gr = g + (size_t)r * gld;
        const float *orow = o + (size_t)r * old;
        float d = 0;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < dv; c++) d += from_bf16(gr[c]) * orow[c];
        D[r] = d;
    }
}
#endif

// dK^T [dk, T] += scale Q^T dS under AMX (Q: the block's packed rows; Qt: scratch).  packed: Bpk
// holds dS as ds_block packed it (k-block-major); else dSh is packed into Bpk here.
static void amx_dk(const Fused *a, CpuOperand Q, int rows, int nk, const uint16_t *dSh, uint16_t *Bpk, int packed,
                   uint16_t *Qt, float *dkT) {
    const AttnShape *s = a->s;
    cpu_amx_transpose(Q.h, (size_t)Q.ld, rows, s->qk_dim, Qt, (size_t)rows);
    if (packed) {
        cpu_amx_gemm_kmajor(s->qk_dim, nk, rows, s->scale, Qt, (size_t)rows, Bpk, nk / 16, 1, dkT, (size_t)s->T);
        return;
    }
    cpu_amx_pack_b(dSh, (size_t)nk, rows, nk, Bpk);
    cpu_amx_gemm(s->qk_dim, nk, rows, s->scale, Qt, (size_t)rows, Bpk, rows / 32, 1, dkT, (size_t)s->T);
}

// Query block qb of sequence b, every head: dq rows stored; dk, dv, dkey_bias added to the
// thread's key-side rows acc (rows [0, *touched) valid; grown and zeroed here).
static void backward_block(const Bwd *w, int b, int qb, float *ws, float *acc, int *touched, Packs *pk) {
    const Fused *a = w->a;
    const AttnShape *s = a->s;
    const int T = s->T, n = s->n_heads, dv = s->v_dim, dkd = s->qk_dim, ldo = n * dv, bf = a->bf16;
    const int i0 = qb * a->bq, rows = T - i0 < a->bq ? T - i0 : a->bq;
    const int nk = s->causal ? i0 + rows : T, ald = acc_ld(s), qc = qcols(s), ld = block_ld(a, nk);
    const int shared = shares_scores(s);
    const size_t blk = blk_floats(s, a->bq), r0 = (size_t)b * T;
    float *P = ws, *dP = ws + blk, *Pdf = ws + 2 * blk, *R = ws + 3 * blk, *dSs = ws + 4 * blk;
    float *G = ws + 5 * blk, *kadd = G + align16((size_t)a->bq * dv), *cs = kadd + align16((size_t)T);
    float *dqa = cs + align16((size_t)T);
    uint16_t *Pdh = bf ? (uint16_t *)Pdf : NULL, *dSh = bf ? Pdh + blk : NULL;
    // acc: dk per K head [T, dk], dv per V head [T, dv], dkey_bias [T, n]; rows [0, *touched)
    // hold sums, the rest is zeroed as blocks reach it.
    float *kacc = acc, *vacc = acc + (size_t)s->k_heads * T * dkd, *bacc = acc + (size_t)T * (ald - n);
    // AMX: kacc and vacc hold dK^T [dk, T] and dV^T [dv, T] per head (the products' M side is
    // the head's width: B, the packed dropped P or dS, is read as it comes from the element pass).
    uint16_t *Bpk = (uint16_t *)(acc + align16((size_t)T * ald)), *Qt = Bpk + blk;
    if (*touched < nk) {
        const size_t t0 = (size_t)*touched, cnt = (size_t)(nk - *touched);
        if (a->amx) {
            // dK^T, dV^T: columns [touched, nk) of each row.
            for (size_t r = 0; r < (size_t)s->k_heads * dkd; r++) memset(kacc + r * T + t0, 0, cnt * sizeof *acc);
            for (size_t r = 0; r < (size_t)s->v_heads * dv; r++) memset(vacc + r * T + t0, 0, cnt * sizeof *acc);
        } else {
            for (int g = 0; g < s->k_heads; g++) memset(kacc + ((size_t)g * T + t0) * dkd, 0, cnt * dkd * sizeof *acc);
            for (int g = 0; g < s->v_heads; g++) memset(vacc + ((size_t)g * T + t0) * dv, 0, cnt * dv * sizeof *acc);
        }
        memset(bacc + t0 * n, 0, cnt * n * sizeof *acc);
        *touched = nk;
    }
    // dq per Q head [bq, dk].
    memset(dqa, 0, (size_t)a->bq * qc * sizeof *dqa);
    if (a->amx) amx_pack_sequence(a, pk, b);
    CpuOperand Qb = {0};
    if (shared) {
        Qb = scores(a, pk, b, 0, i0, rows, nk, R);
        for (int r = 0; r < rows; r++) memset(dSs + (size_t)r * ld, 0, (size_t)nk * sizeof *dSs);
    }
    // fp32 dS is needed for Σ_h dS, the key-bias column sums, or as the fp32 products' operand.
    const int df = !bf || shared || w->dkb;
    for (int h = 0; h < n; h++) {
        key_add(a, b, h, nk, kadd);
        if (!shared) Qb = scores(a, pk, b, h, i0, rows, nk, P);
        const uint32_t *mask = a->drop ? (const uint32_t *)(w->lse_all + mask_at(s)) + mask_row(s, b, h, i0) : NULL;
        const float *lse = w->lse_all + ((size_t)b * n + h) * T;
        CpuOperand Gop;
        if (!bf && s->out_scale) {
            const float *dO = w->G.f + (r0 + i0) * ldo + (size_t)h * dv, *sc = s->out_scale + (size_t)h * dv;
            for (int r = 0; r < rows; r++)
#pragma omp simd
                for (int c = 0; c < dv; c++) G[(size_t)r * dv + c] = dO[(size_t)r * ldo + c] * sc[c];
            Gop = f32_op(G, dv);
        } else {
            Gop = operand(&w->G, r0 + i0, (size_t)h * dv, rows, dv, pk->g, NULL, 0);
        }
        float *dvh = vacc + (size_t)(h / (n / s->v_heads)) * T * dv, *dkh = kacc + (size_t)(h / (n / s->k_heads)) * T * dkd;
        float *dqh = dqa + (size_t)(h / (n / s->q_heads)) * a->bq * dkd;
#ifdef FUSED_AMX
        if (a->amx) {
            // rowsum(P ⊙ dP') = G · O, O the forward's saved unscaled P V (O = Σ_j P̃ V_j with P̃
            // the dropped, rescaled P): one dot of dv per row instead of a pass over the block.
            // Kept in cs, which the key-bias sums below reuse only after the pass.
            const float *O = w->lse_all + (size_t)s->B * n * T + (r0 + i0) * ldo + (size_t)h * dv;
            if (a->d_from_o) row_dots(Gop.h, Gop.ld, O, (size_t)ldo, rows, dv, cs);
            cpu_amx_gemm(rows, nk, dv, 1.0f, Gop.h, (size_t)Gop.ld, amx_vt(a, pk, h), dv / 32, 0, dP, (size_t)ld);
            grads_block(a, i0, rows, nk, ld, shared ? R : P, kadd, lse, a->d_from_o ? cs : NULL, P, dP, df, Pdh,
                        shared ? NULL : dSh, shared ? NULL : Bpk, mask);
            uint16_t *Gt = Qt + (size_t)a->bq * dkd;
            cpu_amx_transpose(Gop.h, (size_t)Gop.ld, rows, dv, Gt, (size_t)rows);
            cpu_amx_gemm_kmajor(dv, nk, rows, 1.0f, Gt, (size_t)rows, Pdh, nk / 16, 1, dvh, (size_t)T);
        } else
#endif
        {
            probs_block(a, i0, rows, nk, ld, shared ? R : P, P, kadd, lse, Pdf, Pdh, mask);
            const CpuOperand Pd = Pdh ? h_op(Pdh, nk) : f32_op(a->drop ? Pdf : P, nk);
            gemm(a, 1, 0, nk, dv, rows, 1.0f, Pd, Gop, 1.0f, f32_res(dvh, dv));
            gemm(a, 0, 1, rows, nk, dv, 1.0f, Gop, v_op(a, pk, b, h), 0.0f, f32_res(dP, nk));
            ds_block(a, rows, nk, ld, P, dP, Pdf, Pdh, df, shared ? NULL : dSh);
        }
        if (w->dkb) {
            memset(cs, 0, (size_t)nk * sizeof *cs);
            for (int r = 0; r < rows; r++) {
                const float *gr = dP + (size_t)r * ld;
#pragma omp simd
                for (int j = 0; j < nk; j++) cs[j] += gr[j];
            }
            for (int j = 0; j < nk; j++) bacc[(size_t)j * n + h] += cs[j];
        }
        if (shared) {
            for (int r = 0; r < rows; r++) {
                float *o = dSs + (size_t)r * ld;
                const float *x = dP + (size_t)r * ld;
#pragma omp simd
                for (int j = 0; j < nk; j++) o[j] += x[j];
            }
            continue;
        }
        if (a->amx) {
            cpu_amx_gemm(rows, dkd, nk, s->scale, dSh, (size_t)nk, amx_k(a, pk, h), T / 32, 1, dqh, (size_t)dkd);
            amx_dk(a, Qb, rows, nk, dSh, Bpk, 1, Qt, dkh);
        } else {
            const CpuOperand dS = dSh ? h_op(dSh, nk) : f32_op(dP, nk);
            gemm(a, 0, 0, rows, dkd, nk, s->scale, dS, k_op(a, pk, b, h), 1.0f, f32_res(dqh, dkd));
            gemm(a, 1, 0, nk, dkd, rows, s->scale, dS, Qb, 1.0f, f32_res(dkh, dkd));
        }
    }
    if (shared) {
        CpuOperand dS = f32_op(dSs, nk);
        if (bf) {
            for (int r = 0; r < rows; r++) bf16_store(dSs + (size_t)r * ld, (size_t)nk, dSh + (size_t)r * nk);
            dS = h_op(dSh, nk);
        }
        if (a->amx) {
            cpu_amx_gemm(rows, dkd, nk, s->scale, dSh, (size_t)nk, amx_k(a, pk, 0), T / 32, 1, dqa, (size_t)dkd);
            amx_dk(a, Qb, rows, nk, dSh, Bpk, 0, Qt, kacc);
        } else {
            gemm(a, 0, 0, rows, dkd, nk, s->scale, dS, k_op(a, pk, b, 0), 1.0f, f32_res(dqa, dkd));
            gemm(a, 1, 0, nk, dkd, rows, s->scale, dS, Qb, 1.0f, f32_res(kacc, dkd));
        }
    }
    for (int g = 0; g < s->q_heads; g++)
        for (int r = 0; r < rows; r++) {
            const size_t at = (r0 + i0 + r) * s->ldq + (size_t)g * dkd;
            const float *x = dqa + ((size_t)g * a->bq + r) * dkd;
            if (bf) bf16_store(x, (size_t)dkd, act_h(w->dq) + at);
            else memcpy(act_f(w->dq) + at, x, (size_t)dkd * sizeof *x);
        }
}

static void fused_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                           const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv_out,
                           Act *dkey_bias, float *dout_scale, float *dout_shift, float *scratch) {
    double t0 = cpu_prof_begin(be);
    const Fused a = fused_begin(be, s, q, k, v);
    const int B = s->B, T = s->T, n = s->n_heads, ldo = n * s->v_dim, nt = cpu_threads(be), nqb = a.nqb;
    const int bf = act_bf16(be);
    const size_t per_thread = thread_floats(s, a.bq), blk = blk_floats(s, a.bq);
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
        Packs pk = packs_at(s, a.bq, ws + core_floats(s, a.bq));
        int cur = -1, touched = 0;
        // With at least two sequences per thread, whole sequences round-robin: one thread sums
        // each sequence's dk, dv and stores them (no hand-over).  Otherwise blocks round-robin,
        // so a sequence's blocks spread over the team even when B is small; rank = the order of
        // the threads' first blocks of the sequence.
        const int whole = B >= 2 * nth, step = whole ? nth * nqb : nth;
        for (int it0 = whole ? tid * nqb : tid; it0 < B * nqb; it0 += step) {
            for (int it = it0; it < (whole ? it0 + nqb : it0 + 1); it++) {
                const int b = it / nqb;
                if (b != cur) {
                    if (cur >= 0)
                        flush_sequence(&w, cur, acc, touched, whole ? 0 : (tid - (cur * nqb) % nth + nth) % nth,
                                       whole ? 1 : (nqb < nth ? nqb : nth));
                    cur = b;
                    touched = 0;
                }
                backward_block(&w, b, it % nqb, ws, acc, &touched, &pk);
            }
        }
        if (cur >= 0)
            flush_sequence(&w, cur, acc, touched, whole ? 0 : (tid - (cur * nqb) % nth + nth) % nth,
                           whole ? 1 : (nqb < nth ? nqb : nth));
    }
    free(w.ticket);
    cpu_attention_affine_grads(be, s, saved + (size_t)B * n * T, dout, dout_scale, dout_shift);
    // Counted as the reference core counts it (twice the forward's products plus the recomputed
    // scores, all T x T even when causal), so the two report comparable GFLOP/s.
    cpu_prof_end(be, OPC_ATTENTION, t0, 2.0 * attention_flops(s) + 2.0 * B * n * (double)T * T * s->qk_dim);
}

void cpu_install_attention(Backend *be) {
    block_override = (int)mhe_env_int("MHE_CPU_ATTN_BLOCK", 16, 4096, 16, -1);
    const char *which = mhe_env_choice("MHE_CPU_ATTENTION", (const char *const[]){"fused", "ref"}, 2);
    // Unless asked: the fused core in bf16 (2.2-2.9x the reference core there), the reference
    // core in fp32, where the fused one is no faster when not causal (oneDNN's one big sgemm per
    // head beats per-block products) and fp32 results stay bit for bit what they were.
    const int fused = which && *which ? strcmp(which, "fused") == 0 : be->act == DT_BF16;
    if (!fused) {
        cpu_install_attention_ref(be);
        return;
    }
    be->attention_sizes = fused_sizes;
    be->attention_forward = fused_forward;
    be->attention_backward = fused_backward;
}

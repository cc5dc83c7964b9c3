#include "trainer/train/optim.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "kernels/optim_math.h"

// Below this many floats a tensor's update runs on one thread: a parallel region per small
// tensor (biases, norms) costs more than the work, badly so on a loaded machine.  Sums use
// fixed chunks either way, so results do not depend on it.
#define OPTIM_PARALLEL_MIN ((size_t)1 << 16)

void optim_state_init(OptimState *s, const ParamTable *t, size_t begin, size_t end) {
    memset(s, 0, sizeof *s);
    if (begin > end || end > t->total) mhe_fatal("optimizer range [%zu, %zu) outside the %zu parameters", begin, end, t->total);
    s->begin = begin;
    s->end = end;
    const size_t n = end - begin;
    // Huge pages: AdamW streams w, g, m and v together, and on 4 KiB pages the moments' TLB
    // misses held it back (BERT small, 54M parameters, bf16 on an AMX Xeon: the gradient norm
    // and optimizer step 24 -> 20-21 ms).
    s->buf = mhe_alloc_huge((2 * n + 1) * sizeof *s->buf);
    s->m = s->buf;
    s->v = s->buf + n;
    s->n_norms = t->count;
    s->norms = mhe_calloc(2 * (size_t)t->count + 1, sizeof *s->norms);
}

void optim_state_free(OptimState *s) {
    free(s->buf);
    free(s->norms);
    memset(s, 0, sizeof *s);
}

int optim_decays(const OptimConfig *o, const ParamTensor *p) { return o->decay_all || p->kind == PARAM_WEIGHT; }

// The part [lo, hi) of tensor p that lies in the state's range; 0 when they do not overlap.
// The part [lo, hi) of tensor p inside [begin, end); 0 when there is none.
static int clip(const ParamTensor *p, size_t begin, size_t end, size_t *lo, size_t *hi) {
    *lo = p->offset > begin ? p->offset : begin;
    *hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    return *lo < *hi;
}
static int overlap(const OptimState *s, const ParamTensor *p, size_t *lo, size_t *hi) {
    return clip(p, s->begin, s->end, lo, hi);
}

// LAMB's trust ratio ‖w‖/‖u‖ from the tensor's sums of squares: 1 for tensors without weight
// decay (biases, LayerNorm, embeddings unless decay_all) and for zero norms.
static float lamb_ratio(const OptimConfig *o, const ParamTensor *p, double wsq, double usq) {
    const double wn = sqrt(wsq), un = sqrt(usq);
    return optim_decays(o, p) && wn > 0 && un > 0 ? (float)(wn / un) : 1.0f;
}

// The tensors of this rank's shard as ranges for the backends' multi-tensor hooks: start[r],
// len[r] of the r-th overlapping tensor, tensor[r] its index in the table.
typedef struct {
    int count;
    size_t *start, *len;
    int *tensor;
} ShardRanges;
static ShardRanges shard_ranges(const OptimState *s, const ParamTable *t) {
    ShardRanges r = {0, mhe_malloc(2 * (size_t)t->count * sizeof(size_t) + 1), NULL,
                     mhe_malloc((size_t)t->count * sizeof(int) + 1)};
    r.len = r.start + t->count;
    size_t lo, hi;
    for (int j = 0; j < t->count; j++)
        if (overlap(s, &t->tensors[j], &lo, &hi)) {
            r.start[r.count] = lo;
            r.len[r.count] = hi - lo;
            r.tensor[r.count++] = j;
        }
    return r;
}
static void shard_ranges_free(ShardRanges *r) {
    free(r->start);
    free(r->tensor);
}

typedef struct {
    float b1, b2, eps;
    OptimBias bc;
} Moments;

// AdamW over n elements; restrict and the scalars in registers let GCC vectorise it (with
// -fno-math-errno, CMakeLists.txt: sqrtf is then the instruction, not a call that may set
// errno).  vsqrtps and vdivps round like their scalar forms: results do not change.
static void adamw_range(float *restrict w, const float *restrict g, float *restrict m, float *restrict v,
                        size_t n, float b1, float b2, float eps, AdamwScalars a, float bc2_sqrt, float scale) {
    for (size_t i = 0; i < n; i++) {
        optim_moments(&m[i], &v[i], g[i] * scale, b1, b2);
        w[i] = adamw_param(w[i], m[i], v[i], a.step_size, a.decay, bc2_sqrt, eps);
    }
}

// Every tensor in one parallel region: each thread takes one contiguous part of [begin, end)
// and updates the pieces of the tensors in it (each with its weight decay).  A region per
// tensor kept the small tensors on one thread and paid a fork/join for each large one.
static void adamw_all(OptimState *s, const OptimConfig *o, const ParamTable *t, const Moments *k,
                      float *w, const float *g, float lr, float scale) {
    const size_t base = s->begin, n = s->end - s->begin;
    const AdamwScalars plain = adamw_scalars(lr, 0.0f, k->bc.bc1);
    const AdamwScalars decayed = adamw_scalars(lr, o->weight_decay, k->bc.bc1);
    const float b1 = k->b1, b2 = k->b2, eps = k->eps, bc2_sqrt = k->bc.bc2_sqrt;
#pragma omp parallel if (n >= OPTIM_PARALLEL_MIN)
    {
        const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        const size_t p0 = base + n * id / nt, p1 = base + n * (id + 1) / nt;
        size_t lo, hi;
        for (int j = 0; j < t->count; j++) {
            const ParamTensor *p = &t->tensors[j];
            if (!clip(p, p0, p1, &lo, &hi)) continue;
            adamw_range(w + lo, g + lo, s->m + (lo - base), s->v + (lo - base), hi - lo, b1, b2, eps,
                        optim_decays(o, p) ? decayed : plain, bc2_sqrt, scale);
        }
    }
}

static inline float lamb_update(const OptimState *s, const Moments *k, size_t i, const float *w, float wd) {
    return lamb_direction_of(w[i], s->m[i - s->begin], s->v[i - s->begin], k->bc.bc1, k->bc.bc2, k->eps, wd);
}

// Fixed chunk boundaries, whatever the thread count: the double sums come out the same with
// 1 or 16 threads, so a run resumed with another thread count stays exact.
#define REDUCE_CHUNKS 64

// LAMB phase 1 over [lo, hi) of one tensor: update m and v, return sum w^2 and sum u^2.
static void lamb_moments(OptimState *s, const Moments *k, size_t lo, size_t hi, const float *w, const float *g,
                         float scale, float wd, double *wsq, double *usq) {
    double sw[REDUCE_CHUNKS], su[REDUCE_CHUNKS];
    float *m = s->m, *v = s->v;
    const size_t base = s->begin, n = hi - lo;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
    for (int c = 0; c < REDUCE_CHUNKS; c++) {
        const size_t a = lo + n * (size_t)c / REDUCE_CHUNKS, b = lo + n * (size_t)(c + 1) / REDUCE_CHUNKS;
        double aw = 0, au = 0;
        for (size_t i = a; i < b; i++) {
            const size_t j = i - base;
            optim_moments(&m[j], &v[j], g[i] * scale, k->b1, k->b2);
            const float u = lamb_update(s, k, i, w, wd);
            aw += (double)w[i] * w[i];
            au += (double)u * u;
        }
        sw[c] = aw;
        su[c] = au;
    }
    double tw = 0, tu = 0;
    for (int c = 0; c < REDUCE_CHUNKS; c++) {
        tw += sw[c];
        tu += su[c];
    }
    *wsq = tw;
    *usq = tu;
}

void optim_step(OptimState *s, const OptimConfig *o, const ParamTable *t, float *params, const float *grads,
                float lr, OptimReduceFn reduce, void *reduce_ctx) {
    optim_step_scaled(s, o, t, params, grads, lr, 1.0f, reduce, reduce_ctx);
}

void optim_step_scaled(OptimState *s, const OptimConfig *o, const ParamTable *t, float *params, const float *grads,
                       float lr, float grad_scale, OptimReduceFn reduce, void *reduce_ctx) {
    s->step++;
    const Moments k = {o->beta1, o->beta2, o->eps, optim_bias(o->beta1, o->beta2, s->step)};
    size_t lo, hi;
    if (o->name == OPT_ADAMW) {
        adamw_all(s, o, t, &k, params, grads, lr, grad_scale);
        return;
    }
    // LAMB phase 1: moments, then per-tensor sums of squares of w and of the update u.
    double *wsq = s->norms, *usq = s->norms + t->count;
    memset(s->norms, 0, 2 * (size_t)t->count * sizeof *s->norms);
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        if (!overlap(s, p, &lo, &hi)) continue;
        lamb_moments(s, &k, lo, hi, params, grads, grad_scale, optim_decays(o, p) ? o->weight_decay : 0.0f, &wsq[j], &usq[j]);
    }
    if (reduce) reduce(s->norms, 2 * t->count, reduce_ctx);
    // Phase 2: every rank sees the full-tensor norms; recompute u (cheaper than storing it).
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        if (!overlap(s, p, &lo, &hi)) continue;
        const float wd = optim_decays(o, p) ? o->weight_decay : 0.0f;
        const float scale = lr * lamb_ratio(o, p, wsq[j], usq[j]);
#pragma omp parallel for schedule(static) if (hi - lo >= OPTIM_PARALLEL_MIN)
        for (size_t i = lo; i < hi; i++) {
            const float u = lamb_update(s, &k, i, params, wd);
            params[i] -= scale * u;
        }
    }
}

// LAMB on a backend with the range hooks: one pass for the moments, directions and per-tensor
// sums of squares over every tensor of this rank's shard, the norms reduced across ranks as in
// the per-tensor path, then one trust-ratio step (same arithmetic, 3 launches instead of ~4 per
// tensor and no synchronisation per tensor).
static void lamb_step_ranges(Backend *be, OptimState *s, const OptimConfig *o, const ParamTable *t, float *params,
                             const float *grads, float *m, float *v, float *u, float lr, float grad_scale,
                             OptimReduceFn reduce, void *reduce_ctx) {
    const OptimBias bc = optim_bias(o->beta1, o->beta2, s->step);
    ShardRanges r = shard_ranges(s, t);
    float *wds = mhe_malloc(2 * (size_t)t->count * sizeof *wds + 1), *coef = wds + t->count;
    double *sq = mhe_malloc(2 * (size_t)t->count * sizeof *sq + 1);
    for (int q = 0; q < r.count; q++) wds[q] = optim_decays(o, &t->tensors[r.tensor[q]]) ? o->weight_decay : 0.0f;
    be->lamb_direction_ranges(be, params, grads, m, v, u, s->begin, r.count, r.start, r.len, wds, o->beta1,
                              o->beta2, o->eps, bc.bc1, bc.bc2, grad_scale, sq);
    memset(s->norms, 0, 2 * (size_t)t->count * sizeof *s->norms);
    for (int q = 0; q < r.count; q++) {
        s->norms[r.tensor[q]] = sq[q];
        s->norms[t->count + r.tensor[q]] = sq[r.count + q];
    }
    if (reduce) reduce(s->norms, 2 * t->count, reduce_ctx);
    for (int q = 0; q < r.count; q++) {
        const int j = r.tensor[q];
        coef[q] = -lr * lamb_ratio(o, &t->tensors[j], s->norms[j], s->norms[t->count + j]);
    }
    be->axpy_ranges(be, params, u, s->begin, r.count, r.start, r.len, coef);
    shard_ranges_free(&r);
    free(wds);
    free(sq);
}

void optim_step_backend(Backend *be, OptimState *s, const OptimConfig *o, const ParamTable *t, float *params,
                        const float *grads, float *m, float *v, float *u, float lr, float grad_scale,
                        OptimReduceFn reduce, void *reduce_ctx) {
    s->step++;
    const OptimBias bc = optim_bias(o->beta1, o->beta2, s->step);
    size_t lo, hi;
    if (o->name == OPT_ADAMW && be->adamw_update_ranges) {
        // Every tensor in one call: step_size does not depend on the weight decay, and a tensor
        // without decay is one whose decay is exactly 1 (adamw_scalars with wd = 0).
        ShardRanges r = shard_ranges(s, t);
        unsigned char *decays = mhe_malloc((size_t)t->count + 1);
        for (int q = 0; q < r.count; q++)
            decays[q] = optim_decays(o, &t->tensors[r.tensor[q]]) && o->weight_decay != 0.0f;
        const AdamwScalars a = adamw_scalars(lr, o->weight_decay, bc.bc1);
        be->adamw_update_ranges(be, params, grads, m, v, s->begin, r.count, r.start, r.len, decays, o->beta1,
                                o->beta2, o->eps, a.step_size, a.decay, bc.bc2_sqrt, grad_scale);
        shard_ranges_free(&r);
        free(decays);
        return;
    }
    if (o->name == OPT_LAMB && be->lamb_direction_ranges && be->axpy_ranges) {
        lamb_step_ranges(be, s, o, t, params, grads, m, v, u, lr, grad_scale, reduce, reduce_ctx);
        return;
    }
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        if (!overlap(s, p, &lo, &hi)) continue;
        const float wd = optim_decays(o, p) ? o->weight_decay : 0.0f;
        const size_t at = lo - s->begin, n = hi - lo;
        if (o->name == OPT_ADAMW) {
            const AdamwScalars a = adamw_scalars(lr, wd, bc.bc1);
            be->adamw_update(be, params + lo, grads + lo, m + at, v + at, n, o->beta1, o->beta2, o->eps, a.step_size,
                             a.decay, bc.bc2_sqrt, grad_scale);
        } else {
            be->lamb_direction(be, params + lo, grads + lo, m + at, v + at, u + at, n, o->beta1, o->beta2, o->eps, wd,
                               bc.bc1, bc.bc2, grad_scale);
            s->norms[j] = be->sum_squares(be, params + lo, n);
            s->norms[t->count + j] = be->sum_squares(be, u + at, n);
        }
    }
    if (o->name == OPT_ADAMW) return;
    for (int j = 0; j < t->count; j++)
        if (!overlap(s, &t->tensors[j], &lo, &hi)) s->norms[j] = s->norms[t->count + j] = 0;
    if (reduce) reduce(s->norms, 2 * t->count, reduce_ctx);
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        if (!overlap(s, p, &lo, &hi)) continue;
        const float ratio = lamb_ratio(o, p, s->norms[j], s->norms[t->count + j]);
        be->axpy(be, -lr * ratio, u + (lo - s->begin), params + lo, hi - lo);
    }
}

double optim_sq_sum(const float *g, size_t n) {
    double part[REDUCE_CHUNKS], acc = 0;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
    for (int c = 0; c < REDUCE_CHUNKS; c++) {
        const size_t a = n * (size_t)c / REDUCE_CHUNKS, b = n * (size_t)(c + 1) / REDUCE_CHUNKS;
        double x = 0;
        for (size_t i = a; i < b; i++) x += (double)g[i] * g[i];
        part[c] = x;
    }
    for (int c = 0; c < REDUCE_CHUNKS; c++) acc += part[c];
    return acc;
}

float optim_clip_coef(double norm, float max_norm) {
    if (max_norm <= 0 || !isfinite(norm)) return 1.0f;
    const double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

double optim_clip_grad_norm(float *g, size_t n, float max_norm) {
    const double norm = sqrt(optim_sq_sum(g, n));
    const float c = optim_clip_coef(norm, max_norm);
    if (c != 1.0f)
        for (size_t i = 0; i < n; i++) g[i] *= c;
    return norm;
}

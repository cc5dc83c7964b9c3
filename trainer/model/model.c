// Model construction: parameter lookup, the activation arena sized up front, accessors.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "trainer/model/model_internal.h"

static size_t find(const ParamTable *t, const char *fmt, int l) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    const ParamTensor *p = param_table_find(t, name);
    return p ? p->offset : NO_PARAM;
}

// MemAvailable from /proc/meminfo (what can be allocated without swapping), or the free pages;
// -1 when unknown.
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb > 0) return kb * 1024.0;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : -1;
}

// "1.5 GiB" or, below a GiB, "12.3 MiB" (small emulated devices, small models).
static const char *show_bytes(double b, char *buf, size_t n) {
    if (b >= 1073741824.0) snprintf(buf, n, "%.1f GiB", b / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    return buf;
}

// Refuses at once a model the machine (or the device) cannot hold rather than failing, or
// swapping, minutes into building it.  Called before any parameter, gradient or activation
// buffer is allocated: first for weights, gradients and state alone, then with the arena.
static void check_memory(const Model *m, size_t arena_bytes) {
    const double per_param = 2.0 + m->state_per_param;
    double need = per_param * (double)m->table.total * sizeof(float) + (double)arena_bytes;
    const size_t arena_floats = arena_bytes;  // only tested for zero below
    char what[96], a[32], b[32], c[32];
    const bool state = m->state_per_param > 0;
    snprintf(what, sizeof what, "weights%s gradients%s%s", state || arena_floats ? "," : " and",
             state ? (arena_floats ? ", optimizer state" : " and optimizer state") : "",
             arena_floats ? " and activations" : "");
    if (m->be->memory_info) {
        size_t free_bytes = 0, total_bytes = 0;
        m->be->memory_info(m->be, &free_bytes, &total_bytes);
        if (need > (double)free_bytes)
            mhe_fail("model: %zu parameters need %s of %s device memory for %s (batch %d x seq %d) but "
                     "the device has %s free of %s; reduce model.layers/hidden/ffn or the batch",
                     m->table.total, show_bytes(need, a, sizeof a), m->be->name, what, m->max_batch, m->max_seq,
                     show_bytes((double)free_bytes, b, sizeof b), show_bytes((double)total_bytes, c, sizeof c));
        return;
    }
    if (strcmp(m->be->name, "cpu") != 0) return;
    double have = host_available_bytes();
    if (have > 0 && need > have)
        mhe_fail("model: %zu parameters need %s for %s (batch %d x seq %d) but this machine has %s "
                 "available; reduce model.layers/hidden/ffn or the batch",
                 m->table.total, show_bytes(need, a, sizeof a), what, m->max_batch, m->max_seq,
                 show_bytes(have, b, sizeof b));
}

static void lookup_params(Model *m) {
    const ParamTable *t = &m->table;
    m->word = find(t, "embed.word", 0);
    m->pos = find(t, "embed.pos", 0);
    m->type = find(t, "embed.type", 0);
    m->eln_g = find(t, "embed.ln.weight", 0);
    m->eln_b = find(t, "embed.ln.bias", 0);
    m->fln_g = find(t, "final_ln.weight", 0);
    m->fln_b = find(t, "final_ln.bias", 0);
    m->hd_w = find(t, "head.dense.weight", 0);
    m->hd_b = find(t, "head.dense.bias", 0);
    m->hln_g = find(t, "head.ln.weight", 0);
    m->hln_b = find(t, "head.ln.bias", 0);
    m->head_bias = find(t, "head.bias", 0);
    m->lp = mhe_calloc((size_t)m->cfg.model.layers, sizeof *m->lp);
    for (int l = 0; l < m->cfg.model.layers; l++) {
        LayerParams *p = &m->lp[l];
        AttnTensor at[ATTN_MAX_TENSORS];
        const int count = m->variant->tensors(&m->cfg, at);
        for (int i = 0; i < count; i++) {
            char name[PARAM_NAME_MAX];
            snprintf(name, sizeof name, "layers.%d.attn.%s", l, at[i].name);
            p->attn[i] = param_offset(t, name);
        }
        p->wo = find(t, "layers.%d.attn.o.weight", l);
        p->bo = find(t, "layers.%d.attn.o.bias", l);
        p->ln1_g = find(t, "layers.%d.ln1.weight", l);
        p->ln1_b = find(t, "layers.%d.ln1.bias", l);
        p->ln2_g = find(t, "layers.%d.ln2.weight", l);
        p->ln2_b = find(t, "layers.%d.ln2.bias", l);
        p->up_w = find(t, "layers.%d.ffn.up.weight", l);
        p->up_b = find(t, "layers.%d.ffn.up.bias", l);
        p->down_w = find(t, "layers.%d.ffn.down.weight", l);
        p->down_b = find(t, "layers.%d.ffn.down.bias", l);
    }
}

static void *arena_bytes(Bump *b, size_t bytes) {
    if (bytes == 0) return NULL;
    void *p = b->base ? b->base + b->used : NULL;
    b->used += (bytes + 63) / 64 * 64;  // 64-byte aligned slices
    return p;
}
float *arena_take(Bump *b, size_t n) { return arena_bytes(b, n * sizeof(float)); }
Act *arena_take_act(Bump *b, size_t n) { return arena_bytes(b, n * b->act_size); }

static int imax(int a, int b) { return a > b ? a : b; }

// q, k, v (or dq, dk, dv) of widths qc, kc, vc: column slices of one [N, qkv_ld] buffer when
// the projections are fused (one GEMM writes them all), else separate buffers.  Slices of a
// zero width are NULL, like arena_take's empty buffers.
static void qkv_buffers(const Model *m, Bump *b, size_t N, int qc, int kc, int vc, Act **q, Act **k, Act **v) {
    if (!m->qkv_ld) {
        *q = arena_take_act(b, N * qc);
        *k = arena_take_act(b, N * kc);
        *v = arena_take_act(b, N * vc);
        return;
    }
    Act *base = arena_take_act(b, N * m->qkv_ld);
    *q = base && qc ? base : NULL;
    *k = base && kc ? AO(m, base, qc) : NULL;
    *v = base && vc ? AO(m, base, qc + kc) : NULL;
}

static void layout(Model *m, Bump *b) {
    const ModelConfig *mc = &m->cfg.model;
    const size_t N = (size_t)m->max_batch * m->max_seq;
    const int D = mc->hidden, F = mc->ffn, V = mc->vocab_size, n = mc->heads, L = mc->layers;
    const int nd = n * mc->head_dim;
    const int pre = mc->norm == NORM_PRE;
    // Room for both fast and plain paths so model_set_fast_path can switch freely.
    AttnPlan p0 = attn_plan_on(&m->cfg, m->be, 0, m->max_batch, m->max_seq);
    AttnPlan p1 = attn_plan_on(&m->cfg, m->be, 1, m->max_batch, m->max_seq);
    const int qc = imax(p0.qc, p1.qc), kc = imax(p0.kc, p1.kc), vc = imax(p0.vc, p1.vc);
    const int qhc = imax(p0.qhc, p1.qhc), khc = imax(p0.khc, p1.khc), vhc = imax(p0.vhc, p1.vhc);
    const int kbias = p0.key_bias || p1.key_bias, small = imax(p0.small, p1.small);
    const int extra = imax(p0.extra, p1.extra);
    size_t saved = 0, scratch = 0;
    for (int fast = 0; fast < 2; fast++) {
        const AttnPlan pl = fast ? p1 : p0;
        const AttnShape s = attn_plan_shape(&m->cfg, &pl, m->max_batch, m->max_seq);
        // Every form core_args may hand the core: also the shared q with the per-head scale
        // (attention_q_scale), whose core may need room the materialised form does not (the
        // cuDNN core's per-head copies of Q).
        for (int form = 0; form < 1 + (pl.q_scale && m->be->attention_q_scale); form++) {
            AttnShape t = s;
            if (form) {
                t.q_heads = pl.qc / pl.qk_dim;
                if (!m->be->attention_q_scale(m->be, &t)) continue;
                static const float marker = 1.0f;  // only tested for non-NULL
                t.q_scale = &marker;
            }
            size_t sv, sc;
            m->be->attention_sizes(m->be, &t, &sv, &sc);
            if (sv > saved) saved = sv;
            if (sc > scratch) scratch = sc;
        }
    }
    m->ids = (int32_t *)arena_take(b, N);
    m->types = (int32_t *)arena_take(b, N);
    m->mask = (int32_t *)arena_take(b, N);
    m->labels = (int32_t *)arena_take(b, N);
    if (mc->arch == ARCH_BERT) {
        m->emb = arena_take_act(b, N * D);
        m->emb_mean = arena_take(b, N);
        m->emb_rstd = arena_take(b, N);
    }
    for (int l = 0; l <= L; l++) m->xs[l] = arena_take_act(b, N * D);
    // train.recompute: layer 0 takes the buffers, later layers share what is recomputed — the
    // attention block's (`attention`) or everything but the layer's input and output (`layer`).
    const LayerActs *first = &m->la[0];
    // Every layer's `small` in one block at one stride, not shared under recompute: the
    // variant's prepare fills all of them before the layers run (attn_prepare).
    float *smalls = arena_take(b, (size_t)small * L);
    m->small_ld = small;
    for (int l = 0; l < L; l++) {
        LayerActs *a = &m->la[l];
        if (l > 0 && m->recompute == RECOMPUTE_LAYER) {
            *a = *first;
        } else {
            a->ln1_mean = arena_take(b, N);
            a->ln1_rstd = arena_take(b, N);
            a->r1 = arena_take_act(b, N * D);
            a->h = pre ? a->r1 : arena_take_act(b, N * D);
            a->f_in = pre ? arena_take_act(b, N * D) : a->h;
            a->ln2_mean = arena_take(b, N);
            a->ln2_rstd = arena_take(b, N);
            a->u = arena_take_act(b, N * F);
            a->g = arena_take_act(b, N * F);
            a->r2 = pre ? NULL : arena_take_act(b, N * D);
        }
        if (l > 0 && m->recompute != RECOMPUTE_NONE) {
            a->a_in = first->a_in;
            a->q = first->q, a->k = first->k, a->v = first->v;
            a->qh = first->qh, a->kh = first->kh, a->vh = first->vh;
            a->kbias = first->kbias, a->extra = first->extra;
            a->att_saved = first->att_saved, a->ctx = first->ctx;
        } else {
            a->a_in = pre ? arena_take_act(b, N * D) : NULL;
            qkv_buffers(m, b, N, qc, kc, vc, &a->q, &a->k, &a->v);
            a->qh = arena_take_act(b, N * qhc);
            a->kh = arena_take_act(b, N * khc);
            a->vh = arena_take_act(b, N * vhc);
            a->kbias = kbias ? arena_take_act(b, N * n) : NULL;
            a->extra = arena_take_act(b, N * extra);
            a->att_saved = arena_take(b, saved);
            a->ctx = arena_take_act(b, N * nd);
        }
        a->small = smalls ? smalls + (size_t)l * small : NULL;
        a->x = m->xs[l];
        if (!pre) a->a_in = a->x;
        if (pre) a->r2 = m->xs[l + 1];
    }
    m->fin = pre ? arena_take_act(b, N * D) : m->xs[L];
    m->fln_mean = arena_take(b, N);
    m->fln_rstd = arena_take(b, N);
    const int task = m->cfg.task.type != TASK_NONE;  // no MLM/LM head: none of its buffers
    if (mc->arch == ARCH_BERT && !task) {
        m->t1 = arena_take_act(b, N * D);
        m->t2 = arena_take_act(b, N * D);
        m->t3 = arena_take_act(b, N * D);
        m->t3_mean = arena_take(b, N);
        m->t3_rstd = arena_take(b, N);
    }
    m->rows = (int32_t *)arena_take(b, N);
    m->labels_c = (int32_t *)arena_take(b, N);
    m->fin_c = arena_take_act(b, N * D);
    m->logits_ld = ops_head_ld(m->be->act, V);
    m->logits = task ? NULL : arena_take_act(b, N * m->logits_ld);
    m->loss = arena_take(b, N);
    m->lse = arena_take(b, N);
    m->dA = arena_take_act(b, N * D);
    m->dB = arena_take_act(b, N * D);
    m->dC = arena_take_act(b, N * D);
    m->dY = arena_take_act(b, N * D);
    m->dF = arena_take_act(b, N * F);
    // Keys/values read from the input (el_att) have [N, D] gradients; values read from the
    // key buffer (skv) have the key's width.
    if (m->qkv_ld) {
        qkv_buffers(m, b, N, qc, kc, vc, &m->dq, &m->dk, &m->dv);  // fused: K, V are own buffers
    } else {
        m->dq = arena_take_act(b, N * qc);
        m->dk = arena_take_act(b, N * imax(kc, p0.k_src == ATTN_SRC_INPUT ? D : 0));
        m->dv = arena_take_act(b, N * imax(vc, p0.v_src != ATTN_SRC_OWN ? imax(D, kc) : 0));
    }
    m->dqh = arena_take_act(b, N * qhc);
    m->dkh = arena_take_act(b, N * khc);
    m->dvh = arena_take_act(b, N * vhc);
    m->dkbias = kbias ? arena_take_act(b, N * n) : NULL;
    m->dctx = arena_take_act(b, N * nd);
    m->dsmall = arena_take(b, (size_t)imax(small, 1));
    m->dextra = arena_take_act(b, N * extra);
    m->att_scratch = arena_take(b, scratch);
    if (task) task_head_layout(m, b);
}

Model *model_create(const Config *cfg, Backend *be, int max_batch, int max_seq) {
    return model_create_with_state(cfg, be, max_batch, max_seq, 0.0);
}

Model *model_create_with_state(const Config *cfg, Backend *be, int max_batch, int max_seq,
                               double state_per_param) {
    if (max_batch < 1 || max_seq < 1 || max_seq > cfg->model.max_seq)
        mhe_fail("model: batch %d x seq %d does not fit (model.max_seq = %d)", max_batch, max_seq,
                 cfg->model.max_seq);
    Model *m = mhe_calloc(1, sizeof *m);
    m->cfg = *cfg;  // shallow: the model only reads numeric fields
    m->be = be;
    m->max_batch = max_batch;
    m->max_seq = max_seq;
    m->state_per_param = state_per_param;
    m->fast_path = cfg->attention.fast_path;
    m->variant = attn_variant(cfg->attention.type);
    m->plan = attn_plan_on(&m->cfg, be, m->fast_path, max_batch, max_seq);
    m->recompute = cfg->train.recompute;
    param_table_build(&m->table, cfg);
    check_memory(m, 0);  // weights and gradients alone, before the per-layer lookups
    lookup_params(m);
    task_head_lookup(m);
    m->xs = mhe_calloc((size_t)cfg->model.layers + 1, sizeof *m->xs);
    m->la = mhe_calloc((size_t)cfg->model.layers, sizeof *m->la);
    // Fused projections where the variant allows (attn_qkv_fusable).  The arena is measured for
    // both layouts so that model_set_fused_qkv can switch without reallocating.
    const int qkv = m->plan.qc + m->plan.kc + m->plan.vc;
    m->qkv_ld = 0;
    const size_t act_size = dtype_size(be->act);
    Bump measure = {NULL, 0, act_size};
    layout(m, &measure);
    if (attn_qkv_fusable(m)) {
        m->qkv_ld = qkv;
        Bump fused = {NULL, 0, act_size};
        layout(m, &fused);
        if (fused.used > measure.used) measure.used = fused.used;
    }
    m->arena_bytes = measure.used;
    check_memory(m, m->arena_bytes);
    m->params = be->alloc(be, m->table.total * sizeof(float));
    m->grads = be->alloc(be, m->table.total * sizeof(float));
    m->arena = be->alloc(be, m->arena_bytes);
    Bump real = {m->arena, 0, act_size};
    layout(m, &real);
    // Dropout sites per forward: embeddings, 3 per layer, and the task head's (task models only,
    // so pretraining masks are unchanged).
    m->sites_per_step = 3 * cfg->model.layers + 1 + (cfg->task.type != TASK_NONE);
    m->drop_seed = cfg->train.seed;
    m->full_logits = 1;
    m->host_rows = mhe_malloc((size_t)max_batch * max_seq * 2 * sizeof(int32_t));
    return m;
}

void model_free(Model *m) {
    if (!m) return;
    m->be->free(m->be, m->arena);
    m->be->free(m->be, m->params);
    m->be->free(m->be, m->grads);
    param_table_free(&m->table);
    free(m->lp);
    free(m->xs);
    free(m->la);
    free(m->host_rows);
    free(m->tk_host_out);
    free(m->tk_host_g);
    free(m->tk_host_rows);
    free(m);
}

void model_init_params(Model *m, uint64_t seed) {
    float *host = mhe_malloc(m->table.total * sizeof(float));
    param_init(&m->table, &m->cfg, host, seed);
    model_set_params(m, host);
    free(host);
}

void model_set_params(Model *m, const float *host) {
    m->be->upload(m->be, m->params, host, m->table.total * sizeof(float));
}
void model_get_params(const Model *m, float *host) {
    m->be->download(m->be, host, m->params, m->table.total * sizeof(float));
}
void model_get_grads(const Model *m, float *host) {
    m->be->download(m->be, host, m->grads, m->table.total * sizeof(float));
}
float *model_params(Model *m) { return m->params; }
float *model_grads(Model *m) { return m->grads; }
const ParamTable *model_param_table(const Model *m) { return &m->table; }
size_t model_param_count(const Model *m) { return m->table.total; }
void model_zero_grad(Model *m) {
    m->be->zero(m->be, m->grads, m->table.total * sizeof(float));
    m->grads_zero = 1;
}

void model_set_fast_path(Model *m, int on) {
    m->fast_path = on != 0;
    m->plan = attn_plan_on(&m->cfg, m->be, m->fast_path, m->max_batch, m->max_seq);
}
void model_set_fused_qkv(Model *m, int on) {
    m->qkv_ld = on && attn_qkv_fusable(m) ? m->plan.qc + m->plan.kc + m->plan.vc : 0;
    Bump real = {m->arena, 0, dtype_size(m->be->act)};
    layout(m, &real);  // fits: model_create measured both layouts
}
int model_fused_qkv(const Model *m) { return m->qkv_ld != 0; }

void model_set_backward_hook(Model *m, ModelBackwardHook hook, void *ctx) {
    m->bw_hook = hook;
    m->bw_ctx = ctx;
}

void model_set_dropout_seed(Model *m, uint64_t seed) {
    m->drop_seed = seed;
    m->drop_counter = 0;
}

int model_full_logits(const Model *m) { return m->full_logits; }

void model_set_full_logits(Model *m, int on) {
    m->full_logits = on || !m->be->gather_rows || !m->be->scatter_rows;
}

void model_set_dropout_counter(Model *m, uint64_t counter) { m->drop_counter = counter; }
uint64_t model_dropout_counter(const Model *m) { return m->drop_counter; }

long model_label_count(const Model *m) { return m->label_count; }
double model_loss_sum(const Model *m) { return m->loss_sum; }
void model_download_logits(const Model *m, float *host) {
    const int V = m->cfg.model.vocab_size, ld = m->logits_ld, R = m->head_rows;
    if (ld == V) {
        m->be->download_act(m->be, host, m->logits, (size_t)R * V);
        return;
    }
    // Padded rows: downloaded a block of rows at a time, then packed on the host.
    enum { BLOCK = 256 };
    float *tmp = mhe_malloc((size_t)BLOCK * ld * sizeof *tmp);
    for (int r0 = 0; r0 < R; r0 += BLOCK) {
        const int n = R - r0 < BLOCK ? R - r0 : BLOCK;
        m->be->download_act(m->be, tmp, (const Act *)((const char *)m->logits + (size_t)r0 * ld * dtype_size(m->be->act)),
                            (size_t)n * ld);
        for (int r = 0; r < n; r++) memcpy(host + (size_t)(r0 + r) * V, tmp + (size_t)r * ld, (size_t)V * sizeof *host);
    }
    free(tmp);
}
size_t model_arena_bytes(const Model *m) { return m->arena_bytes; }
size_t model_state_bytes(const Model *m) { return 2 * m->table.total * sizeof(float); }

// One layer's forward products at (B, T), by part.
typedef struct {
    double proj, core, out, ffn;  // Q/K/V projections, attention core, output projection, FFN
} LayerFlops;

static LayerFlops layer_flops(const Model *m, int B, int T) {
    const ModelConfig *mc = &m->cfg.model;
    const double N = (double)B * T, D = mc->hidden, F = mc->ffn;
    const AttnPlan *pl = &m->plan;
    const double n = mc->heads, nd = n * mc->head_dim;
    const double score_heads = pl->q_heads == 1 && pl->k_heads == 1 ? 1 : n;
    // Projections: the variant's count, or D-input projections of the plan's widths.
    const double proj = pl->proj_macs > 0 ? pl->proj_macs : D * (pl->qc + pl->kc + pl->vc + (pl->key_bias ? n : 0));
    return (LayerFlops){2 * N * proj, 2 * B * (double)T * T * (score_heads * pl->qk_dim + n * pl->v_dim),
                        2 * N * nd * D, 4 * N * D * F};
}

// The flops the step computes: the forward's products, and twice each of them in the backward
// (DESIGN.md §9: MFU counts only what the step computes, so it can never exceed 100%).  When
// the core shares one Q and one K across the heads, the score product is computed once per
// sequence, not once per head.  The MLM head runs on the scored rows only: the count of the
// last forward of this shape, or before any forward the expected count N * mask_prob.
double model_step_flops(const Model *m, int B, int T) {
    const ModelConfig *mc = &m->cfg.model;
    const double N = (double)B * T, D = mc->hidden, V = mc->vocab_size;
    const LayerFlops lf = layer_flops(m, B, T);
    double layer = lf.proj + lf.core + lf.out + lf.ffn;
    double R = N;
    if (m->B == B && m->T == T && m->head_rows > 0) R = m->head_rows;
    else if (m->cfg.objective.type == OBJ_MLM && !m->full_logits) R = N * m->cfg.objective.mask_prob;
    double fwd = mc->layers * layer + 2 * R * D * V + (mc->arch == ARCH_BERT ? 2 * R * D * D : 0);
    if (m->cfg.task.type == TASK_SPAN) fwd = mc->layers * layer + 2 * N * D * 2;
    else if (m->cfg.task.type != TASK_NONE)
        fwd = mc->layers * layer + 2.0 * B * D * (m->tk_C + (mc->arch == ARCH_BERT ? D : 0));
    return 3 * fwd;
}

// u = x Wᵀ + b, g = GELU(u): the FFN's up projection, one backend call where it fuses them.
void linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N, int in,
                         int out, Act *u, Act *g) {
    if (be->linear_gelu_forward) {
        be->linear_gelu_forward(be, kind, x, W, b, N, in, out, u, g);
        return;
    }
    be->linear_forward(be, x, W, b, N, in, out, u);
    be->gelu_forward(be, kind, u, g, (size_t)N * out);
}

// dx = (dy W) * gelu'(u);  dW += dyᵀ x;  db += Σ_rows dy: the down projection's backward into
// the GELU's input, one backend call where it fuses them.
void linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N, int in,
                          int out, const Act *u, Act *dx, float *dW, float *db, int dW_zero) {
    if (be->linear_backward_gelu) {
        be->linear_backward_gelu(be, kind, dy, x, W, N, in, out, u, dx, dW, db, dW_zero);
        return;
    }
    be->linear_backward(be, dy, x, W, N, in, out, dx, 0, dW, db, dW_zero);
    be->gelu_backward(be, kind, u, dx, dx, (size_t)N * in);
}

// What layer_recompute adds (model_forward.c): every layer but the last runs again, `layer`
// without the pre-LN down projection (half the FFN), `attention` only its projections and core.
double model_recompute_flops(const Model *m, int B, int T) {
    const LayerFlops lf = layer_flops(m, B, T);
    const double again = m->cfg.model.layers - 1;
    if (m->recompute == RECOMPUTE_ATTENTION) return again * (lf.proj + lf.core);
    if (m->recompute == RECOMPUTE_LAYER)
        return again * (lf.proj + lf.core + lf.out + (m->cfg.model.norm == NORM_PRE ? lf.ffn / 2 : lf.ffn));
    return 0;
}

// Fixtures shared by the C tests (test_util.h).
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/ops.h"
#include "trainer/model/params.h"
#include "trainer/model/attention/variant.h"

void tiny_config(Config *cfg, Arch arch, AttentionType type, TinyShape shape) {
    config_defaults(cfg);
    cfg->model.arch = arch;
    cfg->model.layers = shape.layers;
    cfg->model.hidden = shape.hidden;
    cfg->model.heads = shape.heads;
    cfg->model.head_dim = shape.head_dim;
    cfg->model.ffn = shape.ffn;
    cfg->model.vocab_size = shape.vocab_size;
    cfg->model.max_seq = shape.max_seq;
    cfg->model.init_std = shape.init_std;
    cfg->attention.type = type;
    cfg->data.seq_len = 0;
    attention_test_keys(cfg);
}

void attention_test_keys(Config *cfg) {
    const AttnTypeSpec *s = attention_type_spec(cfg->attention.type);
    for (const AttnTypeKey *k = s ? s->keys : NULL; k && k->key; k++)
        if (k->test_value >= 0) config_set_int(cfg, k->key, k->test_value);
}

void oracle_attention_json(FILE *f, const Config *cfg) {
    const AttnTypeSpec *s = attention_type_spec(cfg->attention.type);
    fprintf(f, "\"attention\": \"%s\"", s->name);
    for (const AttnTypeKey *k = s->keys; k->key; k++) {
        int v;
        if (config_get_int(cfg, k->key, &v)) fprintf(f, ", \"%s\": %d", strchr(k->key, '.') + 1, v);
    }
}

double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double rel_l2_or_abs(const float *a, const float *ref, size_t n, int *is_abs) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    *is_abs = sqrt(den) < 1e-6;
    return *is_abs ? sqrt(num) : sqrt(num / den);
}

double rel_max(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        if (d > num) num = d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

int cpu_backend_setup(void **state) {
    *state = backend_cpu_create(0);
    return *state ? 0 : -1;
}

int cpu_backend_teardown(void **state) {
    Backend *be = *state;
    be->destroy(be);
    return 0;
}

int attention_has_fast_path(AttentionType t) {
    Config cfg;
    tiny_config(&cfg, ARCH_BERT, t, TINY_SHAPE);
    config_resolve(&cfg, "attention_has_fast_path");
    const AttnVariant *v = attn_variant(t);
    AttnPlan p0 = v->plan(&cfg, 0), p1 = v->plan(&cfg, 1);
    config_free(&cfg);
    return memcmp(&p0, &p1, sizeof p0) != 0;
}

int variant_cases(VariantCase *out) {
    int k = 0;
    const Arch arches[2] = {ARCH_BERT, ARCH_GPT};
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < ATTN_TYPE_COUNT; t++) {
            const int both = attention_has_fast_path((AttentionType)t);
            for (int fast = 1; fast >= (both ? 0 : 1); fast--) {
                VariantCase *c = &out[k++];
                snprintf(c->name, sizeof c->name, "%s_%s%s", arch_name(arches[a]),
                         attention_type_name((AttentionType)t), both ? (fast ? "_fast" : "_plain") : "");
                c->arch = arches[a];
                c->type = (AttentionType)t;
                c->fast = fast;
            }
        }
    return k;
}

void test_fill_params(const ParamTable *t, float *p, uint64_t seed, uint64_t stream) {
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *x = &t->tensors[i];
        Rng r = rng_stream(seed, stream, (uint64_t)i);
        const int gain = x->kind == PARAM_NORM && strstr(x->name, ".weight") != NULL;
        const int mix = strstr(x->name, ".mix") != NULL;
        double base = 0.0, std = 0.15;
        if (x->kind == PARAM_BIAS) std = 0.1;
        if (x->kind == PARAM_NORM) base = gain ? 1.0 : 0.0, std = gain ? 0.2 : 0.1;
        if (x->kind == PARAM_HEAD_EMBED) base = mix ? 1.0 : 0.0, std = 0.5;
        for (size_t j = 0; j < x->numel; j++) p[x->offset + j] = (float)(base + std * rng_next_normal(&r));
    }
}

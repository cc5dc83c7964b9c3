// mhetrain import: a Hugging Face BERT or GPT-2 folder to a run directory (see import.h).
#include "trainer/io/import.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fs.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/export.h"
#include "trainer/io/safetensors.h"

#define IMP_PATH_MAX 4096

static void path_join(char *out, const char *dir, const char *file) {
    mhe_path_join(out, IMP_PATH_MAX, dir, file, "import");
}

// ---- config.json -------------------------------------------------------------------------

typedef struct {
    const char *path;
    cJSON *root;
} Json;

static const cJSON *jget(const Json *j, const char *key) { return cJSON_GetObjectItemCaseSensitive(j->root, key); }

static int jint(const Json *j, const char *key, int dflt, bool required) {
    const cJSON *v = jget(j, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) mhe_fail("import: %s: missing \"%s\"", j->path, key);
        return dflt;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < 0)
        mhe_fail("import: %s: \"%s\" must be a non-negative integer", j->path, key);
    return (int)v->valuedouble;
}

static float jfloat(const Json *j, const char *key, float dflt) {
    const cJSON *v = jget(j, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsNumber(v)) mhe_fail("import: %s: \"%s\" must be a number", j->path, key);
    return (float)v->valuedouble;
}

static const char *jstr(const Json *j, const char *key, const char *dflt) {
    const cJSON *v = jget(j, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsString(v)) mhe_fail("import: %s: \"%s\" must be a string", j->path, key);
    return v->valuestring;
}

static bool jbool(const Json *j, const char *key, bool dflt) {
    const cJSON *v = jget(j, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) mhe_fail("import: %s: \"%s\" must be true or false", j->path, key);
    return cJSON_IsTrue(v);
}

// HF activation names mhetrain implements: erf GELU, and the tanh approximation.
static Activation activation_of(const Json *j, const char *key, const char *dflt) {
    const char *a = jstr(j, key, dflt);
    if (strcmp(a, "gelu") == 0) return ACT_GELU_ERF;
    if (strcmp(a, "gelu_new") == 0 || strcmp(a, "gelu_pytorch_tanh") == 0)
        return ACT_GELU_TANH;
    mhe_fail("import: %s: \"%s\": \"%s\" is not representable (mhetrain has gelu and gelu_new)", j->path, key, a);
}

typedef enum { SRC_BERT_MLM, SRC_BERT_MODEL, SRC_GPT2_LM, SRC_GPT2_MODEL } SourceKind;

static SourceKind source_kind(const Json *j) {
    const cJSON *arch = jget(j, "architectures");
    const char *model_type = jstr(j, "model_type", "");
    const char *a = cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0 && cJSON_IsString(cJSON_GetArrayItem(arch, 0))
                        ? cJSON_GetArrayItem(arch, 0)->valuestring
                        : "";
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 1)
        mhe_fail("import: %s: \"architectures\" lists more than one class", j->path);
    if (strcmp(a, "BertForMaskedLM") == 0) return SRC_BERT_MLM;
    if (strcmp(a, "BertModel") == 0) return SRC_BERT_MODEL;
    if (strcmp(a, "GPT2LMHeadModel") == 0) return SRC_GPT2_LM;
    if (strcmp(a, "GPT2Model") == 0) return SRC_GPT2_MODEL;
    if (!*a && strcmp(model_type, "bert") == 0) return SRC_BERT_MLM;
    if (!*a && strcmp(model_type, "gpt2") == 0) return SRC_GPT2_LM;
    mhe_fail("import: %s: architecture \"%s\" (model_type \"%s\") is not representable: mhetrain imports "
             "BertForMaskedLM, BertModel, GPT2LMHeadModel and GPT2Model",
             j->path, *a ? a : "?", model_type);
}

static void bert_config(const Json *j, Config *cfg) {
    ModelConfig *m = &cfg->model;
    m->arch = ARCH_BERT;
    m->vocab_size = jint(j, "vocab_size", 0, true);
    m->hidden = jint(j, "hidden_size", 0, true);
    m->layers = jint(j, "num_hidden_layers", 0, true);
    m->heads = jint(j, "num_attention_heads", 0, true);
    m->ffn = jint(j, "intermediate_size", 0, true);
    m->max_seq = jint(j, "max_position_embeddings", 512, false);
    m->type_vocab = jint(j, "type_vocab_size", 2, false);
    m->activation = activation_of(j, "hidden_act", "gelu");
    m->ln_eps = jfloat(j, "layer_norm_eps", 1e-12f);
    m->dropout = jfloat(j, "hidden_dropout_prob", 0.1f);
    m->attn_dropout = jfloat(j, "attention_probs_dropout_prob", 0.1f);
    m->init_std = jfloat(j, "initializer_range", 0.02f);
    m->norm = NORM_POST;
    const char *pos = jstr(j, "position_embedding_type", "absolute");
    if (strcmp(pos, "absolute") != 0)
        mhe_fail("import: %s: \"position_embedding_type\": \"%s\" is not representable (mhetrain has learned absolute "
                 "positions)", j->path, pos);
    if (jbool(j, "is_decoder", false) || jbool(j, "add_cross_attention", false))
        mhe_fail("import: %s: a decoder BERT (is_decoder / add_cross_attention) is not representable", j->path);
    if (m->type_vocab < 1) mhe_fail("import: %s: \"type_vocab_size\" must be >= 1", j->path);
    cfg->explicit_fields |= CONFIG_SET_NORM | CONFIG_SET_ACTIVATION | CONFIG_SET_LN_EPS | CONFIG_SET_TYPE_VOCAB;
}

static void gpt2_config(const Json *j, Config *cfg) {
    ModelConfig *m = &cfg->model;
    m->arch = ARCH_GPT;
    m->vocab_size = jint(j, "vocab_size", 0, true);
    m->hidden = jint(j, "n_embd", 0, true);
    m->layers = jint(j, "n_layer", 0, true);
    m->heads = jint(j, "n_head", 0, true);
    m->ffn = jint(j, "n_inner", 0, false);  // null: 4 * n_embd, which is also mhetrain's 0
    m->max_seq = jint(j, "n_positions", 1024, false);
    m->type_vocab = 0;
    m->activation = activation_of(j, "activation_function", "gelu_new");
    m->ln_eps = jfloat(j, "layer_norm_epsilon", 1e-5f);
    m->dropout = jfloat(j, "resid_pdrop", 0.1f);
    m->attn_dropout = jfloat(j, "attn_pdrop", 0.1f);
    m->init_std = jfloat(j, "initializer_range", 0.02f);
    m->norm = NORM_PRE;
    if (!jbool(j, "scale_attn_weights", true))
        mhe_fail("import: %s: \"scale_attn_weights\": false is not representable (mhetrain scales scores by "
                 "1/sqrt(head_dim))", j->path);
    if (jbool(j, "scale_attn_by_inverse_layer_idx", false))
        mhe_fail("import: %s: \"scale_attn_by_inverse_layer_idx\": true is not representable", j->path);
    if (jbool(j, "add_cross_attention", false))
        mhe_fail("import: %s: \"add_cross_attention\": true is not representable", j->path);
    cfg->explicit_fields |= CONFIG_SET_NORM | CONFIG_SET_ACTIVATION | CONFIG_SET_LN_EPS | CONFIG_SET_TYPE_VOCAB;
}

static void check_shape_config(const Json *j, const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    if (m->hidden <= 0 || m->heads <= 0 || m->layers <= 0 || m->vocab_size <= 0 || m->max_seq <= 0)
        mhe_fail("import: %s: sizes must be positive", j->path);
    if (m->hidden % m->heads != 0)
        mhe_fail("import: %s: hidden size %d is not divisible by %d heads", j->path, m->hidden, m->heads);
    if (!jbool(j, "tie_word_embeddings", true))
        mhe_fail("import: %s: \"tie_word_embeddings\": false is not representable (mhetrain ties the output layer "
                 "to the word embeddings)", j->path);
}

// ---- weights -----------------------------------------------------------------------------

typedef struct {
    int n;
    StFile *files;
    char **paths;
    bool **used;  // per file, per tensor
    unsigned dtypes;  // bit per StDtype read
} Weights;

static void weights_add_file(Weights *w, const char *path) {
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->paths[i], path) == 0) return;
    w->files = mhe_realloc(w->files, (size_t)(w->n + 1) * sizeof *w->files);
    w->paths = mhe_realloc(w->paths, (size_t)(w->n + 1) * sizeof *w->paths);
    w->used = mhe_realloc(w->used, (size_t)(w->n + 1) * sizeof *w->used);
    st_read(&w->files[w->n], path);
    w->paths[w->n] = mhe_strdup(path);
    w->used[w->n] = mhe_calloc((size_t)w->files[w->n].count + 1, sizeof(bool));
    w->n++;
}

// model.safetensors, or the shards model.safetensors.index.json names.  A pickled
// pytorch_model.bin alone is refused: reading it would mean executing pickle.
static void weights_open(Weights *w, const char *dir) {
    char path[IMP_PATH_MAX], idx[IMP_PATH_MAX];
    memset(w, 0, sizeof *w);
    path_join(path, dir, "model.safetensors");
    path_join(idx, dir, "model.safetensors.index.json");
    if (mhe_is_file(path)) {
        weights_add_file(w, path);
        return;
    }
    if (mhe_is_file(idx)) {
        size_t len;
        char *text = mhe_read_file(idx, &len);
        cJSON *root = cJSON_ParseWithLength(text, len);
        const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (!cJSON_IsObject(map)) mhe_fail("import: %s: not JSON with a \"weight_map\" object", idx);
        const cJSON *e;
        cJSON_ArrayForEach(e, map) {
            if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
                mhe_fail("import: %s: weight_map[\"%s\"] must name a shard file in the folder", idx, e->string);
            char shard[IMP_PATH_MAX];
            path_join(shard, dir, e->valuestring);
            if (!mhe_is_file(shard)) mhe_fail("import: %s: shard %s (of tensor %s) not found", idx, shard, e->string);
            weights_add_file(w, shard);
        }
        cJSON_Delete(root);
        free(text);
        if (w->n == 0) mhe_fail("import: %s: empty weight_map", idx);
        return;
    }
    path_join(path, dir, "pytorch_model.bin");
    if (mhe_is_file(path))
        mhe_fail("import: %s: pickled PyTorch weights are not read (unpickling runs code); save the model with "
                 "safetensors (save_pretrained(..., safe_serialization=True)) and import that", path);
    mhe_fail("import: %s: no model.safetensors or model.safetensors.index.json", dir);
}

static void weights_close(Weights *w) {
    for (int i = 0; i < w->n; i++) {
        st_free(&w->files[i]);
        free(w->paths[i]);
        free(w->used[i]);
    }
    free(w->files);
    free(w->paths);
    free(w->used);
}

// The tensor `name` (NULL when absent), its file in *file.
static const StTensor *weights_find(Weights *w, const char *name, int *file) {
    for (int i = 0; i < w->n; i++) {
        const StTensor *t = st_find(&w->files[i], name);
        if (t) {
            *file = i;
            w->used[i][t - w->files[i].tensors] = true;
            return t;
        }
    }
    return NULL;
}

// IEEE binary16 -> binary32.  Every half is a float (5 exponent bits fit in 8, 10 mantissa bits
// in 23), so this is exact: subnormal halves become normal floats, inf and NaN stay so.
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {  // zero or subnormal: man * 2^-24, a float exactly
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    uint32_t bits = exp == 0x1f ? sign | 0x7f800000u | (man << 13) : sign | (exp - 15 + 127) << 23 | (man << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// The stored values of t as fp32 (F32 as is; BF16, F16 widened exactly).  0 for another dtype.
static int widen(const StTensor *t, size_t numel, float *dst) {
    const uint16_t *src = t->data;
    if (t->dtype == ST_F32) {
        memcpy(dst, t->data, numel * sizeof(float));
    } else if (t->dtype == ST_BF16) {  // bf16 is the top half of an fp32
        for (size_t i = 0; i < numel; i++) {
            uint32_t bits = (uint32_t)src[i] << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    } else if (t->dtype == ST_F16) {
        for (size_t i = 0; i < numel; i++) dst[i] = half_to_float(src[i]);
    } else {
        return 0;
    }
    return 1;
}

// Reads `name` of shape [rows] (cols 0) or [rows, cols] as fp32 into dst (row-major, as stored).
// Returns false when absent and `optional`; otherwise missing, misshapen or an unsupported
// dtype is an error naming the file and the tensor.
static bool read_tensor(Weights *w, const char *dir, const char *name, int rows, int cols, float *dst, bool optional) {
    int f;
    const StTensor *t = weights_find(w, name, &f);
    if (!t) {
        if (optional) return false;
        mhe_fail("import: %s: tensor %s is missing", w->n == 1 ? w->paths[0] : dir, name);
    }
    const int want_ndim = cols > 0 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != rows || (cols > 0 && t->shape[1] != cols)) {
        char got[96] = "", want[48];
        for (int k = 0; k < t->ndim; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? ", " : "", (long long)t->shape[k]);
        if (cols > 0)
            snprintf(want, sizeof want, "%d, %d", rows, cols);
        else
            snprintf(want, sizeof want, "%d", rows);
        mhe_fail("import: %s: tensor %s has shape [%s], expected [%s] from config.json", w->paths[f], name, got, want);
    }
    const size_t numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    if (!widen(t, numel, dst))
        mhe_fail("import: %s: tensor %s: dtype %s not supported (F32, BF16 or F16 expected)", w->paths[f], name,
                 st_dtype_name(t->dtype));
    w->dtypes |= 1u << t->dtype;
    return true;
}

// [rows, cols] in the file, stored transposed into dst [cols, rows] (GPT-2's Conv1D).
static void read_transposed(Weights *w, const char *dir, const char *name, int rows, int cols, float *dst) {
    float *tmp = mhe_malloc((size_t)rows * cols * sizeof(float));
    read_tensor(w, dir, name, rows, cols, tmp, false);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = tmp[(size_t)r * cols + c];
    free(tmp);
}

static float *P(const ParamTable *t, float *params, const char *fmt, int l) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    return params + param_offset(t, name);
}

// A tensor that must equal one already read (a tied output layer written out anyway).
static void check_tied(Weights *w, const char *name, const float *tied, size_t numel, const char *to) {
    int f;
    const StTensor *t = weights_find(w, name, &f);
    if (!t) return;
    float *mine = t->nbytes == numel * st_dtype_size(t->dtype) ? mhe_malloc(numel * sizeof(float)) : NULL;
    int same = mine && widen(t, numel, mine) && memcmp(mine, tied, numel * sizeof(float)) == 0;
    free(mine);
    if (!same)
        mhe_fail("import: %s: tensor %s differs from %s: an untied output layer is not representable", w->paths[f],
                 name, to);
}

// Returns how many head tensors were absent (BertModel: the MLM head, left as initialised).
static int bert_weights(Weights *w, const char *dir, const ParamTable *t, float *params, const char *prefix,
                        bool head_optional) {
    char hf[192];
    int absent = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        export_bert_name(p->name, hf, sizeof hf);
        const char *name = hf;
        char stripped[192];
        if (strncmp(hf, "bert.", 5) == 0) {  // BertModel: no "bert." prefix
            snprintf(stripped, sizeof stripped, "%s%s", prefix, hf + 5);
            name = stripped;
        }
        const bool is_head = strncmp(p->name, "head.", 5) == 0;
        if (!read_tensor(w, dir, name, p->shape[0], p->shape[1], params + p->offset, is_head && head_optional))
            absent++;
    }
    const ParamTensor *we = param_table_find(t, "embed.word"), *hb = param_table_find(t, "head.bias");
    check_tied(w, "cls.predictions.decoder.weight", params + we->offset, we->numel, "the word embeddings");
    check_tied(w, "cls.predictions.decoder.bias", params + hb->offset, hb->numel, "cls.predictions.bias");
    return absent;
}

static void gpt2_weights(Weights *w, const char *dir, const Config *cfg, const ParamTable *t, float *params,
                         const char *pre) {
    const int D = cfg->model.hidden, F = cfg->model.ffn;
    char name[192];
#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
    const ParamTensor *we = param_table_find(t, "embed.word"), *wp = param_table_find(t, "embed.pos");
    read_tensor(w, dir, NAME("%swte.weight", pre), we->shape[0], D, params + we->offset, false);
    read_tensor(w, dir, NAME("%swpe.weight", pre), wp->shape[0], D, params + wp->offset, false);
    float *qkv_w = mhe_malloc((size_t)3 * D * D * sizeof(float)), *qkv_b = mhe_malloc((size_t)3 * D * sizeof(float));
    for (int l = 0; l < cfg->model.layers; l++) {
        read_tensor(w, dir, NAME("%sh.%d.ln_1.weight", pre, l), D, 0, P(t, params, "layers.%d.ln1.weight", l), false);
        read_tensor(w, dir, NAME("%sh.%d.ln_1.bias", pre, l), D, 0, P(t, params, "layers.%d.ln1.bias", l), false);
        read_tensor(w, dir, NAME("%sh.%d.ln_2.weight", pre, l), D, 0, P(t, params, "layers.%d.ln2.weight", l), false);
        read_tensor(w, dir, NAME("%sh.%d.ln_2.bias", pre, l), D, 0, P(t, params, "layers.%d.ln2.bias", l), false);
        // c_attn [D in, 3D out] = q | k | v along the output dimension.
        read_tensor(w, dir, NAME("%sh.%d.attn.c_attn.weight", pre, l), D, 3 * D, qkv_w, false);
        read_tensor(w, dir, NAME("%sh.%d.attn.c_attn.bias", pre, l), 3 * D, 0, qkv_b, false);
        static const char *parts[3] = {"q", "k", "v"};
        for (int part = 0; part < 3; part++) {
            char canon[PARAM_NAME_MAX];
            snprintf(canon, sizeof canon, "layers.%%d.attn.%s.weight", parts[part]);
            float *dst = P(t, params, canon, l);
            for (int o = 0; o < D; o++)
                for (int i = 0; i < D; i++) dst[(size_t)o * D + i] = qkv_w[(size_t)i * 3 * D + (size_t)part * D + o];
            snprintf(canon, sizeof canon, "layers.%%d.attn.%s.bias", parts[part]);
            memcpy(P(t, params, canon, l), qkv_b + (size_t)part * D, (size_t)D * sizeof(float));
        }
        read_transposed(w, dir, NAME("%sh.%d.attn.c_proj.weight", pre, l), D, D, P(t, params, "layers.%d.attn.o.weight", l));
        read_tensor(w, dir, NAME("%sh.%d.attn.c_proj.bias", pre, l), D, 0, P(t, params, "layers.%d.attn.o.bias", l), false);
        read_transposed(w, dir, NAME("%sh.%d.mlp.c_fc.weight", pre, l), D, F, P(t, params, "layers.%d.ffn.up.weight", l));
        read_tensor(w, dir, NAME("%sh.%d.mlp.c_fc.bias", pre, l), F, 0, P(t, params, "layers.%d.ffn.up.bias", l), false);
        read_transposed(w, dir, NAME("%sh.%d.mlp.c_proj.weight", pre, l), F, D, P(t, params, "layers.%d.ffn.down.weight", l));
        read_tensor(w, dir, NAME("%sh.%d.mlp.c_proj.bias", pre, l), D, 0, P(t, params, "layers.%d.ffn.down.bias", l), false);
    }
    read_tensor(w, dir, NAME("%sln_f.weight", pre), D, 0, P(t, params, "final_ln.weight", -1), false);
    read_tensor(w, dir, NAME("%sln_f.bias", pre), D, 0, P(t, params, "final_ln.bias", -1), false);
#undef NAME
    free(qkv_w);
    free(qkv_b);
    check_tied(w, "lm_head.weight", params + we->offset, we->numel, "the word embeddings");
}

// Every tensor in the files was used, or is a buffer / the pooler that mhetrain does not keep.
static int check_all_used(const Weights *w) {
    int dropped = 0;
    for (int f = 0; f < w->n; f++)
        for (int i = 0; i < w->files[f].count; i++) {
            const char *name = w->files[f].tensors[i].name;
            if (w->used[f][i] || mhe_has_suffix(name, ".attn.bias") || mhe_has_suffix(name, ".attn.masked_bias") ||
                mhe_has_suffix(name, "position_ids"))
                continue;
            if (strncmp(name, "pooler.", 7) == 0 || strncmp(name, "bert.pooler.", 12) == 0) {
                dropped++;
                continue;
            }
            mhe_fail("import: %s: tensor %s is not part of a model mhetrain can represent", w->paths[f], name);
        }
    return dropped;
}

// ---- tokenizer -------------------------------------------------------------------------------

static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt",
                                              "tokenizer_config.json", "special_tokens_map.json"};
#define N_TOKENIZER_FILES (int)(sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0])

// Copies the tokenizer files into write_dir/tokenizer/ and returns the one data.tokenizer names
// where the run will be, final_dir/tokenizer/... (absolute; malloc'd), or NULL when the folder
// has none.
static char *import_tokenizer(const char *hf_dir, const char *write_dir, const char *final_dir, const Config *cfg) {
    char src[IMP_PATH_MAX], dst_dir[IMP_PATH_MAX], dst[IMP_PATH_MAX];
    path_join(dst_dir, write_dir, "tokenizer");
    bool have[N_TOKENIZER_FILES] = {0};
    int any = 0;
    for (int i = 0; i < N_TOKENIZER_FILES; i++) {
        path_join(src, hf_dir, TOKENIZER_FILES[i]);
        have[i] = mhe_is_file(src);
        any += have[i] && i < 3;
    }
    if (!any) return NULL;
    mhe_mkdirs(dst_dir);
    for (int i = 0; i < N_TOKENIZER_FILES; i++) {
        if (!have[i]) continue;
        path_join(src, hf_dir, TOKENIZER_FILES[i]);
        path_join(dst, dst_dir, TOKENIZER_FILES[i]);
        mhe_copy_file(src, dst, "import");
    }
    // tokenizer.json carries the normalizer (cased or not); else the arch's vocabulary file.
    const char *pick = have[0] ? "tokenizer.json" : cfg->model.arch == ARCH_BERT ? "vocab.txt" : "vocab.json";
    if (!have[0] && !have[cfg->model.arch == ARCH_BERT ? 1 : 2]) return NULL;
    // Read from the user's folder, not the staging copy: a refusal names the file they can fix.
    path_join(src, hf_dir, pick);
    Tokenizer *tok = tokenizer_load(src);
    if (tokenizer_vocab_size(tok) > cfg->model.vocab_size)
        mhe_fail("import: %s/%s: %d tokens but config.json's vocab_size is %d", hf_dir, pick,
                 tokenizer_vocab_size(tok), cfg->model.vocab_size);
    if ((tokenizer_kind(tok) == TOK_BPE) != (cfg->model.arch == ARCH_GPT))
        mhe_fail("import: %s/%s: a %s tokenizer for a %s model is not representable", hf_dir, pick,
                 tokenizer_kind(tok) == TOK_BPE ? "BPE" : "WordPiece", arch_name(cfg->model.arch));
    tokenizer_free(tok);
    path_join(dst_dir, final_dir, "tokenizer");
    path_join(dst, dst_dir, pick);
    return mhe_strdup(dst);
}

// ---- the run directory -------------------------------------------------------------------

void import_run(const ImportOptions *opt) {
    char path[IMP_PATH_MAX];
    path_join(path, opt->hf_dir, "config.json");
    if (!mhe_is_file(path)) mhe_fail("import: %s: not found (a Hugging Face model folder has config.json)", path);
    size_t len;
    char *text = mhe_read_file(path, &len);
    Json j = {path, cJSON_ParseWithLength(text, len)};
    if (!cJSON_IsObject(j.root)) mhe_fail("import: %s: not a JSON object", path);
    const SourceKind kind = source_kind(&j);
    const bool bert = kind == SRC_BERT_MLM || kind == SRC_BERT_MODEL;

    Config cfg;
    config_defaults(&cfg);
    if (bert)
        bert_config(&j, &cfg);
    else
        gpt2_config(&j, &cfg);
    check_shape_config(&j, &cfg);
    cfg.attention.type = ATTN_MHA;
    cfg.data.seq_len = cfg.model.max_seq;

    // A run (or anything else) already there is replaced only with --force, and whole.
    if (mhe_path_within(opt->hf_dir, opt->out_dir))
        mhe_fail("import: --out %s is or holds the folder being imported (%s): choose another directory", opt->out_dir,
                 opt->hf_dir);
    MheOutDir out;
    mhe_outdir_begin(&out, opt->out_dir, opt->force, "import");
    free(cfg.train.out_dir);
    cfg.train.out_dir = mhe_strdup(out.target_abs);
    char *tok = import_tokenizer(opt->hf_dir, out.staging, out.target_abs, &cfg);
    if (tok) {
        free(cfg.data.tokenizer);
        cfg.data.tokenizer = tok;
    } else {
        fprintf(stderr, "mhetrain import: %s has no tokenizer files: data.tokenizer left empty\n", opt->hf_dir);
    }
    config_resolve(&cfg, path);

    ParamTable t;
    param_table_build(&t, &cfg);
    float *params = mhe_malloc(t.total * sizeof(float));
    // A BertModel has no MLM head: it starts as mhetrain initialises one (seeded by train.seed).
    param_init(&t, &cfg, params, cfg.train.seed);
    Weights w;
    weights_open(&w, opt->hf_dir);
    int fresh = 0;
    if (bert) {
        // BertForMaskedLM prefixes "bert."; BertModel (and some MLM folders) do not.
        int f;
        const char *prefix = weights_find(&w, "bert.embeddings.word_embeddings.weight", &f) ? "bert." : "";
        fresh = bert_weights(&w, opt->hf_dir, &t, params, prefix, kind == SRC_BERT_MODEL);
    } else {
        int f;
        const char *prefix = weights_find(&w, "transformer.wte.weight", &f) ? "transformer." : "";
        gpt2_weights(&w, opt->hf_dir, &cfg, &t, params, prefix);
    }
    const int dropped = check_all_used(&w);

    checkpoint_save_new_run(out.staging, &cfg, &t, params, "import");
    mhe_outdir_commit(&out);

    static const char *const KIND[] = {"BertForMaskedLM", "BertModel", "GPT2LMHeadModel", "GPT2Model"};
    printf("imported %s (%s: L=%d D=%d n=%d ffn=%d vocab=%d, %zu parameters) to %s/checkpoints/step_00000000\n",
           opt->hf_dir, KIND[kind], cfg.model.layers, cfg.model.hidden, cfg.model.heads, cfg.model.ffn,
           cfg.model.vocab_size, t.total, opt->out_dir);
    char dts[64] = "";
    for (int d = 0; d <= ST_F16; d++)
        if (w.dtypes & (1u << d))
            snprintf(dts + strlen(dts), sizeof dts - strlen(dts), "%s%s", dts[0] ? "+" : "", st_dtype_name((StDtype)d));
    printf("weights: %s%s\n", dts, w.dtypes & ~(1u << ST_F32) ? ", widened to fp32 exactly" : " (as stored)");
    if (fresh) printf("note: %d MLM head tensors are not in a BertModel: initialised as mhetrain does\n", fresh);
    if (dropped) printf("note: %d pooler tensors dropped (mhetrain has no pooler)\n", dropped);
    weights_close(&w);
    free(params);
    param_table_free(&t);
    config_free(&cfg);
    cJSON_Delete(j.root);
    free(text);
}

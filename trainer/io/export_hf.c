// Weights and config.json for the three export formats of export.h.
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/config/task_formats.h"
#include "trainer/io/export.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/attention/variant.h"

// Tensors handed to StFile are not copied: derived ones (transposes, fused q|k|v) are owned
// here until the file is written.
typedef struct {
    StFile st;
    int n_owned, cap_owned;
    float **owned;
} WeightSet;

static float *owned_buffer(WeightSet *w, size_t numel) {
    if (w->n_owned == w->cap_owned) {
        w->cap_owned = w->cap_owned ? 2 * w->cap_owned : 32;
        w->owned = mhe_realloc(w->owned, (size_t)w->cap_owned * sizeof *w->owned);
    }
    return w->owned[w->n_owned++] = mhe_malloc(numel * sizeof(float));
}

static void add_as_is(WeightSet *w, const char *name, const ParamTensor *p, const float *params) {
    const int64_t shape[2] = {p->shape[0], p->shape[1]};
    st_add(&w->st, name, ST_F32, p->ndim, shape, params + p->offset);
}

// GPT-2's Conv1D stores [in, out] (y = x W + b): the transpose of our [out, in].
static void add_transposed(WeightSet *w, const char *name, const ParamTensor *p, const float *params) {
    const int rows = p->shape[0], cols = p->shape[1];
    float *dst = owned_buffer(w, p->numel);
    const float *src = params + p->offset;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
    const int64_t shape[2] = {cols, rows};
    st_add(&w->st, name, ST_F32, 2, shape, dst);
}

static const ParamTensor *need(const ParamTable *t, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    const ParamTensor *p = param_table_find(t, name);
    if (!p) mhe_fatal("export: internal error: no parameter %s", name);
    return p;
}

// Splits "layers.<l>.<rest>" (returns l, or -1 for a non-layer tensor).
static int layer_of(const char *name, const char **rest) {
    int l, n = 0;
    if (sscanf(name, "layers.%d.%n", &l, &n) == 1 && n > 0) {
        *rest = name + n;
        return l;
    }
    *rest = name;
    return -1;
}

static const char *bert_layer_part(const char *rest, char *suffix_out) {
    static const char *map[][2] = {
        {"attn.q.", "attention.self.query."},   {"attn.k.", "attention.self.key."},
        {"attn.v.", "attention.self.value."},   {"attn.o.", "attention.output.dense."},
        {"ln1.", "attention.output.LayerNorm."}, {"ffn.up.", "intermediate.dense."},
        {"ffn.down.", "output.dense."},          {"ln2.", "output.LayerNorm."},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t k = strlen(map[i][0]);
        if (strncmp(rest, map[i][0], k) == 0) {
            strcpy(suffix_out, rest + k);
            return map[i][1];
        }
    }
    return NULL;
}

static void bert_name(const char *canon, char *out, size_t n) {
    static const char *top[][2] = {
        {"embed.word", "bert.embeddings.word_embeddings.weight"},
        {"embed.pos", "bert.embeddings.position_embeddings.weight"},
        {"embed.type", "bert.embeddings.token_type_embeddings.weight"},
        {"embed.ln.weight", "bert.embeddings.LayerNorm.weight"},
        {"embed.ln.bias", "bert.embeddings.LayerNorm.bias"},
        {"head.dense.weight", "cls.predictions.transform.dense.weight"},
        {"head.dense.bias", "cls.predictions.transform.dense.bias"},
        {"head.ln.weight", "cls.predictions.transform.LayerNorm.weight"},
        {"head.ln.bias", "cls.predictions.transform.LayerNorm.bias"},
        {"head.bias", "cls.predictions.bias"},
        // Fine-tuning heads (issue 14): BertForSequenceClassification / BertForQuestionAnswering.
        {"task.pooler.weight", "bert.pooler.dense.weight"},
        {"task.pooler.bias", "bert.pooler.dense.bias"},
        {"task.classifier.weight", "classifier.weight"},
        {"task.classifier.bias", "classifier.bias"},
        {"task.qa.weight", "qa_outputs.weight"},
        {"task.qa.bias", "qa_outputs.bias"},
    };
    const char *rest;
    int l = layer_of(canon, &rest);
    if (l < 0) {
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (strcmp(canon, top[i][0]) == 0) {
                snprintf(out, n, "%s", top[i][1]);
                return;
            }
    } else {
        char suffix[PARAM_NAME_MAX];
        const char *part = bert_layer_part(rest, suffix);
        if (part) {
            snprintf(out, n, "bert.encoder.layer.%d.%s%s", l, part, suffix);
            return;
        }
    }
    mhe_fatal("export: internal error: no BERT name for %s", canon);
}

void export_bert_name(const char *canon, char *out, size_t n) { bert_name(canon, out, n); }

// BertForMaskedLM: same layout, renamed.  cls.predictions.decoder.{weight,bias} are tied to the
// word embeddings and cls.predictions.bias, so (as save_pretrained does) they are not written.
static void bert_weights(WeightSet *w, const ParamTable *t, const float *params) {
    char name[160];
    for (int i = 0; i < t->count; i++) {
        bert_name(t->tensors[i].name, name, sizeof name);
        add_as_is(w, name, &t->tensors[i], params);
    }
}

// GPT2LMHeadModel: Conv1D weights transposed, q|k|v fused into c_attn along the output dim.
// lm_head.weight is tied to wte and not written; the causal-mask buffers are not persistent.
static void gpt2_weights(WeightSet *w, const Config *cfg, const ParamTable *t, const float *params) {
    const int D = cfg->model.hidden;
    char name[160];
    add_as_is(w, "transformer.wte.weight", param_table_find(t, "embed.word"), params);
    add_as_is(w, "transformer.wpe.weight", param_table_find(t, "embed.pos"), params);
    for (int l = 0; l < cfg->model.layers; l++) {
        const ParamTensor *qkv_w[3] = {need(t, "layers.%d.attn.q.weight", l), need(t, "layers.%d.attn.k.weight", l),
                                       need(t, "layers.%d.attn.v.weight", l)};
        const ParamTensor *qkv_b[3] = {need(t, "layers.%d.attn.q.bias", l), need(t, "layers.%d.attn.k.bias", l),
                                       need(t, "layers.%d.attn.v.bias", l)};
        float *fw = owned_buffer(w, (size_t)D * 3 * D), *fb = owned_buffer(w, (size_t)3 * D);
        for (int part = 0; part < 3; part++) {
            const float *src = params + qkv_w[part]->offset;  // [D out, D in]
            for (int o = 0; o < D; o++)
                for (int i = 0; i < D; i++) fw[(size_t)i * 3 * D + (size_t)part * D + o] = src[(size_t)o * D + i];
            memcpy(fb + (size_t)part * D, params + qkv_b[part]->offset, (size_t)D * sizeof(float));
        }
        const int64_t ws[2] = {D, 3 * D}, bs[1] = {3 * D};
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.weight", l);
        st_add(&w->st, name, ST_F32, 2, ws, fw);
        snprintf(name, sizeof name, "transformer.h.%d.attn.c_attn.bias", l);
        st_add(&w->st, name, ST_F32, 1, bs, fb);
        static const char *conv[][2] = {{"attn.o", "attn.c_proj"}, {"ffn.up", "mlp.c_fc"}, {"ffn.down", "mlp.c_proj"}};
        for (size_t c = 0; c < sizeof conv / sizeof conv[0]; c++) {
            char canon[PARAM_NAME_MAX];
            snprintf(canon, sizeof canon, "layers.%%d.%s.weight", conv[c][0]);
            snprintf(name, sizeof name, "transformer.h.%d.%s.weight", l, conv[c][1]);
            add_transposed(w, name, need(t, canon, l), params);
            snprintf(canon, sizeof canon, "layers.%%d.%s.bias", conv[c][0]);
            snprintf(name, sizeof name, "transformer.h.%d.%s.bias", l, conv[c][1]);
            add_as_is(w, name, need(t, canon, l), params);
        }
        static const char *norms[][2] = {{"ln1", "ln_1"}, {"ln2", "ln_2"}};
        for (size_t c = 0; c < 2; c++)
            for (int b = 0; b < 2; b++) {
                const char *wb = b ? "bias" : "weight";
                char canon[PARAM_NAME_MAX];
                snprintf(canon, sizeof canon, "layers.%%d.%s.%s", norms[c][0], wb);
                snprintf(name, sizeof name, "transformer.h.%d.%s.%s", l, norms[c][1], wb);
                add_as_is(w, name, need(t, canon, l), params);
            }
    }
    add_as_is(w, "transformer.ln_f.weight", param_table_find(t, "final_ln.weight"), params);
    add_as_is(w, "transformer.ln_f.bias", param_table_find(t, "final_ln.bias"), params);
    // Fine-tuning heads (issue 14) are nn.Linear in transformers, not Conv1D: [out, in] as ours.
    static const char *heads[][2] = {
        {"task.classifier.weight", "score.weight"},  // GPT2ForSequenceClassification: no bias
        {"task.qa.weight", "qa_outputs.weight"},     // GPT2ForQuestionAnswering
        {"task.qa.bias", "qa_outputs.bias"},
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        const ParamTensor *p = param_table_find(t, heads[i][0]);
        if (p) add_as_is(w, heads[i][1], p, params);
    }
}

// The name modeling_mhe.py gives a canonical parameter: the transformer under `mhe.` (its
// base_model_prefix) with `.weight` after the three nn.Embedding tables, the MLM head as is, the
// fine-tuning heads under BERT's / GPT-2's names.
void export_mhetrain_name(const char *canon, Arch arch, char *out, size_t n) {
    static const char *map[][2] = {
        {"embed.word", "mhe.embed.word.weight"},
        {"embed.pos", "mhe.embed.pos.weight"},
        {"embed.type", "mhe.embed.token_type.weight"},
        {"task.pooler.weight", "mhe.pooler.dense.weight"},
        {"task.pooler.bias", "mhe.pooler.dense.bias"},
        {"task.qa.weight", "qa_outputs.weight"},
        {"task.qa.bias", "qa_outputs.bias"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(canon, map[i][0]) == 0) {
            snprintf(out, n, "%s", map[i][1]);
            return;
        }
    if (strncmp(canon, "task.classifier.", 16) == 0)
        snprintf(out, n, "%s.%s", arch == ARCH_BERT ? "classifier" : "score", canon + 16);
    else if (strncmp(canon, "head.", 5) == 0)
        snprintf(out, n, "%s", canon);
    else
        snprintf(out, n, "mhe.%s", canon);
}

ExportHead export_head(const Config *cfg, const ParamTable *t) {
    ExportHead h = {EXPORT_HEAD_LM, 0};
    // The tensors decide (what the checkpoint holds); the config only tells regression apart.
    const ParamTensor *cls = param_table_find(t, "task.classifier.weight");
    if (param_table_find(t, "task.qa.weight")) {
        h.kind = EXPORT_HEAD_SPAN;
        h.num_labels = 2;
    } else if (cls) {
        // The contract's regression has num_labels = 1, which transformers also reads as regression.
        h.kind = cfg->task.type == TASK_REGRESSION || cls->shape[0] == 1 ? EXPORT_HEAD_REGRESSION
                                                                         : EXPORT_HEAD_CLASSIFICATION;
        h.num_labels = (int)cls->shape[0];
    }
    return h;
}

const char *export_class_name(const Config *cfg, ExportFormat format, const ExportHead *head) {
    static const char *names[3][4] = {
        // LM, classification, regression, span
        {"BertForMaskedLM", "BertForSequenceClassification", "BertForSequenceClassification",
         "BertForQuestionAnswering"},
        {"GPT2LMHeadModel", "GPT2ForSequenceClassification", "GPT2ForSequenceClassification",
         "GPT2ForQuestionAnswering"},
        {NULL, "MheForSequenceClassification", "MheForSequenceClassification", "MheForQuestionAnswering"},
    };
    const int row = format == EXPORT_HF_BERT ? 0 : format == EXPORT_HF_GPT2 ? 1 : 2;
    if (row == 2 && head->kind == EXPORT_HEAD_LM) return cfg->model.arch == ARCH_BERT ? "MheForMaskedLM" : "MheForCausalLM";
    return names[row][head->kind];
}

const char *export_auto_class(const Config *cfg, const ExportHead *head) {
    switch (head->kind) {
    case EXPORT_HEAD_CLASSIFICATION:
    case EXPORT_HEAD_REGRESSION: return "AutoModelForSequenceClassification";
    case EXPORT_HEAD_SPAN: return "AutoModelForQuestionAnswering";
    default: return cfg->model.arch == ARCH_BERT ? "AutoModelForMaskedLM" : "AutoModelForCausalLM";
    }
}

void export_write_weights(const Config *cfg, const ParamTable *t, const float *params, ExportFormat format,
                          const char *path) {
    WeightSet w = {0};
    st_init(&w.st);
    if (format == EXPORT_HF_BERT)
        bert_weights(&w, t, params);
    else if (format == EXPORT_HF_GPT2)
        gpt2_weights(&w, cfg, t, params);
    else
        for (int i = 0; i < t->count; i++) {
            char name[160];
            export_mhetrain_name(t->tensors[i].name, cfg->model.arch, name, sizeof name);
            add_as_is(&w, name, &t->tensors[i], params);
        }
    if (st_write(&w.st, path) != 0) mhe_fatal("export: cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < w.n_owned; i++) free(w.owned[i]);
    free(w.owned);
    // The names were copied by st_add; the tensors point into params or the freed buffers.
    st_free(&w.st);
}

// A float config value as the shortest decimal that reads back to the same float, so
// config.json says 1e-12 rather than 9.9999999600419720e-13.
static void add_float(cJSON *o, const char *key, float v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.9g", (double)v);
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    cJSON_AddNumberToObject(o, key, strtod(buf, NULL));
}

static const char *hf_activation(const Config *cfg) {
    return cfg->model.activation == ACT_GELU_TANH ? "gelu_new" : "gelu";
}

static void add_special_ids(cJSON *o, const Config *cfg, const Tokenizer *tok) {
    if (!tok) return;
    SpecialIds s = tokenizer_special_ids(tok);
    if (cfg->model.arch == ARCH_GPT) {
        if (s.eos >= 0) {
            cJSON_AddNumberToObject(o, "bos_token_id", s.eos);
            cJSON_AddNumberToObject(o, "eos_token_id", s.eos);
        }
    } else if (s.pad >= 0) {
        cJSON_AddNumberToObject(o, "pad_token_id", s.pad);
    }
}

static void bert_config(cJSON *o, const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    cJSON_AddStringToObject(o, "model_type", "bert");
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->heads);
    cJSON_AddNumberToObject(o, "intermediate_size", m->ffn);
    cJSON_AddStringToObject(o, "hidden_act", hf_activation(cfg));
    add_float(o, "hidden_dropout_prob", m->dropout);
    add_float(o, "attention_probs_dropout_prob", m->attn_dropout);
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->max_seq);
    cJSON_AddNumberToObject(o, "type_vocab_size", m->type_vocab);
    add_float(o, "initializer_range", m->init_std);
    add_float(o, "layer_norm_eps", m->ln_eps);
    cJSON_AddStringToObject(o, "position_embedding_type", "absolute");
    cJSON_AddNullToObject(o, "classifier_dropout");
    cJSON_AddBoolToObject(o, "use_cache", 1);
}

static void gpt2_config(cJSON *o, const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "n_positions", m->max_seq);
    cJSON_AddNumberToObject(o, "n_embd", m->hidden);
    cJSON_AddNumberToObject(o, "n_layer", m->layers);
    cJSON_AddNumberToObject(o, "n_head", m->heads);
    cJSON_AddNumberToObject(o, "n_inner", m->ffn);
    cJSON_AddStringToObject(o, "activation_function", hf_activation(cfg));
    add_float(o, "resid_pdrop", m->dropout);
    add_float(o, "embd_pdrop", m->dropout);
    add_float(o, "attn_pdrop", m->attn_dropout);
    add_float(o, "layer_norm_epsilon", m->ln_eps);
    add_float(o, "initializer_range", m->init_std);
    cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(o, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(o, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(o, "use_cache", 1);
}

static void put_number(void *obj, const char *key, double value) { cJSON_AddNumberToObject(obj, key, value); }

// auto_map: every Auto class modeling_mhe.py serves for this arch (MLM for bert, CLM for gpt).
static void mhetrain_config(cJSON *o, const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    const int bert = m->arch == ARCH_BERT;
    static const char *autos[][2] = {
        {"AutoModel", "MheModel"},
        {"AutoModelForMaskedLM", "MheForMaskedLM"},
        {"AutoModelForCausalLM", "MheForCausalLM"},
        {"AutoModelForSequenceClassification", "MheForSequenceClassification"},
        {"AutoModelForTokenClassification", "MheForTokenClassification"},
        {"AutoModelForQuestionAnswering", "MheForQuestionAnswering"},
    };
    cJSON_AddStringToObject(o, "model_type", "mhetrain");
    cJSON *map = cJSON_AddObjectToObject(o, "auto_map");
    cJSON_AddStringToObject(map, "AutoConfig", "configuration_mhe.MheConfig");
    for (size_t i = 0; i < sizeof autos / sizeof autos[0]; i++) {
        if ((i == 1 && !bert) || (i == 2 && bert)) continue;
        char target[80];
        snprintf(target, sizeof target, "modeling_mhe.%s", autos[i][1]);
        cJSON_AddStringToObject(map, autos[i][0], target);
    }
    cJSON_AddStringToObject(o, "arch", arch_name(m->arch));
    cJSON_AddStringToObject(o, "attention_type", attention_type_name(cfg->attention.type));
    const AttnVariant *v = attn_variant(cfg->attention.type);
    if (v->export_keys) v->export_keys(cfg, put_number, o);  // e.g. kv_groups, latent_dim
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->heads);
    cJSON_AddNumberToObject(o, "head_dim", m->head_dim);
    cJSON_AddNumberToObject(o, "intermediate_size", m->ffn);
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->max_seq);
    cJSON_AddNumberToObject(o, "type_vocab_size", bert ? m->type_vocab : 0);
    cJSON_AddStringToObject(o, "norm_placement", m->norm == NORM_PRE ? "pre" : "post");
    cJSON_AddStringToObject(o, "hidden_act", hf_activation(cfg));
    add_float(o, "layer_norm_eps", m->ln_eps);
    add_float(o, "hidden_dropout_prob", m->dropout);
    add_float(o, "attention_probs_dropout_prob", m->attn_dropout);
    add_float(o, "initializer_range", m->init_std);
}

// The name of class i: task.labels (generic formats), else the format's own spelling
// (task_formats.c: "entailment", "not_entailment", ...), else transformers' LABEL_i.
static void label_name(const Config *cfg, int i, char *out, size_t n) {
    snprintf(out, n, "LABEL_%d", i);
    const char *p = cfg->task.labels;
    if (p && *p) {
        for (int k = 0; k < i && p; k++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
        if (p) snprintf(out, n, "%.*s", (int)(strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p)), p);
        return;
    }
    const TaskFormatSpec *fmt = cfg->task.format ? task_format_find(cfg->task.format) : NULL;
    if (fmt && i < TASK_MAX_LABELS && fmt->labels[i]) snprintf(out, n, "%s", fmt->labels[i]);
}

// The head's keys: num_labels through id2label / label2id (what transformers saves),
// problem_type, which the sequence classifiers read to pick their loss, the task's format as
// transformers' finetuning_task, and the classifier dropout when the task set its own.
static void head_config(cJSON *o, const Config *cfg, const ExportHead *head) {
    if (head->kind == EXPORT_HEAD_LM) return;
    if (cfg->task.format && *cfg->task.format) cJSON_AddStringToObject(o, "finetuning_task", cfg->task.format);
    if (cfg->task.classifier_dropout >= 0) {
        cJSON_DeleteItemFromObject(o, "classifier_dropout");
        add_float(o, "classifier_dropout", cfg->task.classifier_dropout);
    }
    if (head->kind == EXPORT_HEAD_SPAN) return;
    cJSON *id2label = cJSON_AddObjectToObject(o, "id2label"), *label2id = cJSON_AddObjectToObject(o, "label2id");
    for (int i = 0; i < head->num_labels; i++) {
        char id[16], label[64];
        snprintf(id, sizeof id, "%d", i);
        label_name(cfg, i, label, sizeof label);
        cJSON_AddStringToObject(id2label, id, label);
        cJSON_AddNumberToObject(label2id, label, i);
    }
    cJSON_AddStringToObject(o, "problem_type",
                            head->kind == EXPORT_HEAD_REGRESSION ? "regression" : "single_label_classification");
}

void export_write_config(const Config *cfg, ExportFormat format, const ExportHead *head, const Tokenizer *tok,
                         const char *path) {
    cJSON *o = cJSON_CreateObject();
    const char *cls = export_class_name(cfg, format, head);
    cJSON_AddItemToObject(o, "architectures", cJSON_CreateStringArray(&cls, 1));
    if (format == EXPORT_HF_BERT)
        bert_config(o, cfg);
    else if (format == EXPORT_HF_GPT2)
        gpt2_config(o, cfg);
    else
        mhetrain_config(o, cfg);
    add_special_ids(o, cfg, tok);
    // transformers' pipelines load a tokenizer for a config class they do not know (MheConfig)
    // only when config.json names its class (the same as tokenizer_config.json's).
    if (format == EXPORT_MHETRAIN && tok)
        cJSON_AddStringToObject(o, "tokenizer_class", cfg->model.arch == ARCH_BERT ? "BertTokenizer" : "GPT2Tokenizer");
    // GPT2ForSequenceClassification needs a pad id to find each row's last token in a batch.
    if (cfg->model.arch == ARCH_GPT && head->kind != EXPORT_HEAD_LM && tok && tokenizer_special_ids(tok).eos >= 0)
        cJSON_AddNumberToObject(o, "pad_token_id", tokenizer_special_ids(tok).eos);
    head_config(o, cfg, head);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    export_write_json(path, o);
    cJSON_Delete(o);
}

// mhetrain params: the parameter table of a config, grouped by layer and kind, with totals.
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"
#include "trainer/model/params.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain params CONFIG.yaml [key.path=value ...] [--totals]\n"
            "\n"
            "Prints the model's parameter table (name, shape, count) grouped by layer and kind\n"
            "(embeddings; per layer: attention, norms, ffn; head), then the totals:\n"
            "all parameters, parameters without embeddings, attention weights per layer, and\n"
            "  attention weights (no biases): N\n"
            "which counts the attention weight matrices and head embeddings of every layer,\n"
            "biases excluded (the count the MHE paper reports).\n"
            "\n"
            "  key.path=value   override a config value, e.g. model.hidden=512\n"
            "  --totals         print only the totals\n"
            "  -h, --help       this help\n");
}

static void print_tensor(const ParamTensor *p) {
    char shape[48];
    if (p->ndim == 2)
        snprintf(shape, sizeof shape, "[%d, %d]", p->shape[0], p->shape[1]);
    else
        snprintf(shape, sizeof shape, "[%d]", p->shape[0]);
    printf("    %-36s %-14s %12zu\n", p->name, shape, p->numel);
}

typedef enum { GROUP_ATTENTION, GROUP_NORMS, GROUP_FFN } LayerGroup;

static LayerGroup layer_group(const ParamTensor *p) {
    if (p->in_attention) return GROUP_ATTENTION;
    if (p->kind == PARAM_NORM) return GROUP_NORMS;
    return GROUP_FFN;
}

// Tensors of layer -1 whose names start with "embed." are the input side; the rest is the head.
static int is_embedding_side(const ParamTensor *p) {
    return p->layer < 0 && strncmp(p->name, "embed.", 6) == 0;
}

static void print_table(const ParamTable *t, int layers) {
    size_t sum = 0;
    printf("embeddings\n");
    for (int i = 0; i < t->count; i++)
        if (is_embedding_side(&t->tensors[i])) {
            print_tensor(&t->tensors[i]);
            sum += t->tensors[i].numel;
        }
    printf("  total %zu\n", sum);
    static const char *const GROUP_NAMES[] = {"attention", "norms", "ffn"};
    for (int l = 0; l < layers; l++) {
        printf("layer %d\n", l);
        size_t layer_sum = 0;
        for (int g = GROUP_ATTENTION; g <= GROUP_FFN; g++) {
            printf("  %s\n", GROUP_NAMES[g]);
            for (int i = 0; i < t->count; i++) {
                const ParamTensor *p = &t->tensors[i];
                if (p->layer != l || layer_group(p) != (LayerGroup)g) continue;
                print_tensor(p);
                layer_sum += p->numel;
            }
        }
        printf("  total %zu\n", layer_sum);
    }
    sum = 0;
    printf("head\n");
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        if (p->layer < 0 && !is_embedding_side(p)) {
            print_tensor(p);
            sum += p->numel;
        }
    }
    printf("  total %zu\n", sum);
}

int cmd_params(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    CliConfigArgs args = {0};
    int totals_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--totals") == 0) {
            totals_only = 1;
        } else {
            cli_take_config_arg(&args, "params", argv[i], usage);
        }
    }
    cli_require_config(&args, "params", usage);
    const char *path = args.path;
    Config cfg;
    config_load(&cfg, path, args.n_overrides, args.overrides);
    ParamTable t;
    param_table_build(&t, &cfg);
    const ModelConfig *m = &cfg.model;
    printf("config: %s\n", path);
    printf("model: %s, %d layers, D=%d, n=%d, d=%d, ffn=%d, vocab=%d, max_seq=%d\n",
           arch_name(m->arch), m->layers, m->hidden, m->heads, m->head_dim, m->ffn,
           m->vocab_size, m->max_seq);
    printf("attention: %s", attention_type_name(cfg.attention.type));
    // The variant's own integer keys (registry), e.g. groups=2, latent_dim=256.
    const AttnTypeSpec *spec = attention_type_spec(cfg.attention.type);
    for (const AttnTypeKey *k = spec->keys; k->key; k++) {
        const char *field = strchr(k->key, '.') + 1;
        int value = 0;
        if (config_get_int(&cfg, k->key, &value)) printf(", %s=%d", field, value);
    }
    printf("\n\n");
    if (!totals_only) {
        print_table(&t, m->layers);
        printf("\n");
    }
    size_t embeddings = 0;
    for (int i = 0; i < t.count; i++)
        if (t.tensors[i].kind == PARAM_EMBEDDING) embeddings += t.tensors[i].numel;
    printf("tensors: %d\n", t.count);
    printf("all parameters: %zu\n", t.total);
    printf("without embeddings: %zu\n", t.total - embeddings);
    printf("attention weights per layer (no biases): %zu\n", param_attention_weights_per_layer(&t));
    printf("attention weights (no biases): %zu\n", param_attention_weights(&t));
    param_table_free(&t);
    config_free(&cfg);
    return 0;
}

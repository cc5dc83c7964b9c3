// mhetrain export: picks the format, loads the checkpoint, writes the export directory.
#include "trainer/io/export.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fs.h"
#include "trainer/config/task_formats.h"
#include "trainer/io/checkpoint.h"

#define EXPORT_PATH_MAX 4096

static const char *const MODELING_FILES[] = {"configuration_mhe.py", "modeling_mhe.py"};

static void path_join(char *out, const char *dir, const char *file) {
    mhe_path_join(out, EXPORT_PATH_MAX, dir, file, "export");
}

// A GPT sequence task whose inputs are text pairs.  mhetrain joins a pair as
// a <|endoftext|> b and pads with <|endoftext|> (trainer/task/task_features.c), while
// GPT2ForSequenceClassification reads each row at the token before its first pad id, which for a
// pair is the token before the separator; the remote code reads the last position of the
// attention mask instead.  Which formats are pairs is the format table's (task_formats.c).
static int gpt_pair_sequence_task(const Config *cfg) {
    const TaskConfig *t = &cfg->task;
    if (cfg->model.arch != ARCH_GPT || (t->type != TASK_CLASSIFICATION && t->type != TASK_REGRESSION)) return 0;
    return task_config_pair(t);
}

ExportFormat export_native_format(const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    if (cfg->attention.type != ATTN_MHA || m->heads * m->head_dim != m->hidden) return EXPORT_MHETRAIN;
    if (m->arch == ARCH_BERT && m->norm == NORM_POST) return EXPORT_HF_BERT;
    if (m->arch == ARCH_GPT && m->norm == NORM_PRE && !gpt_pair_sequence_task(cfg)) return EXPORT_HF_GPT2;
    return EXPORT_MHETRAIN;
}

const char *export_format_unsupported(const Config *cfg, ExportFormat format) {
    if (format == EXPORT_AUTO || format == EXPORT_MHETRAIN || format == export_native_format(cfg)) return NULL;
    const ModelConfig *m = &cfg->model;
    if (format == EXPORT_HF) {
        if (export_native_format(cfg) != EXPORT_MHETRAIN) return NULL;
        format = m->arch == ARCH_BERT ? EXPORT_HF_BERT : EXPORT_HF_GPT2;
    }
    const Arch want = format == EXPORT_HF_BERT ? ARCH_BERT : ARCH_GPT;
    if (m->arch != want) return format == EXPORT_HF_BERT ? "BertForMaskedLM needs model.arch bert" : "GPT2LMHeadModel needs model.arch gpt";
    if (cfg->attention.type != ATTN_MHA) return "stock transformers classes need attention.type mha";
    if (m->heads * m->head_dim != m->hidden) return "stock transformers classes need heads * head_dim = hidden";
    if (format == EXPORT_HF_GPT2 && m->norm == NORM_PRE && gpt_pair_sequence_task(cfg))
        return "GPT2ForSequenceClassification reads a row at the token before its first pad id, which in "
               "mhetrain's pair inputs (a <|endoftext|> b) is the separator: the remote code "
               "(--format mhetrain, the default here) reads the attention mask";
    return format == EXPORT_HF_BERT ? "BertForMaskedLM is post-LN (model.norm post)" : "GPT2LMHeadModel is pre-LN (model.norm pre)";
}

// The directory holding configuration_mhe.py and modeling_mhe.py: $MHE_HF_DIR, then relative to
// the executable (installed: ../share/mhetrain/hf; build tree inside the source: ../trainer/hf),
// then the source tree this binary was built from.
static int find_modeling_dir(char *out) {
    char exe[EXPORT_PATH_MAX], cand[EXPORT_PATH_MAX], probe[EXPORT_PATH_MAX];
    const char *env = getenv("MHE_HF_DIR");
    const char *dirs[4];
    int n = 0;
    if (env && *env) dirs[n++] = env;
    char exe_share[EXPORT_PATH_MAX], exe_tree[EXPORT_PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(exe_share, sizeof exe_share, "%.4000s/../share/mhetrain/hf", exe);
        snprintf(exe_tree, sizeof exe_tree, "%.4000s/../trainer/hf", exe);
        dirs[n++] = exe_share;
        dirs[n++] = exe_tree;
    }
#ifdef MHE_SOURCE_DIR
    dirs[n++] = MHE_SOURCE_DIR "/trainer/hf";
#endif
    for (int i = 0; i < n; i++) {
        snprintf(cand, sizeof cand, "%s", dirs[i]);
        path_join(probe, cand, MODELING_FILES[1]);
        // A folder named by the user that lacks the files is a mistake, not a miss to skip past.
        if (i == 0 && env && *env && !mhe_is_file(probe))
            mhe_fail("MHE_HF_DIR=%s: expected a folder holding %s and %s (trainer/hf/)", env, MODELING_FILES[0],
                     MODELING_FILES[1]);
        if (mhe_is_file(probe)) {
            snprintf(out, EXPORT_PATH_MAX, "%s", cand);
            return 0;
        }
    }
    return -1;
}

void export_copy_modeling_files(const char *dir, const Config *cfg) {
    char src_dir[EXPORT_PATH_MAX], src[EXPORT_PATH_MAX], dst[EXPORT_PATH_MAX], rel[EXPORT_PATH_MAX];
    if (find_modeling_dir(src_dir) != 0)
        mhe_fatal("export: cannot find modeling_mhe.py (set MHE_HF_DIR to the folder trainer/hf of the mhetrain "
                  "sources)");
    for (size_t i = 0; i < sizeof MODELING_FILES / sizeof MODELING_FILES[0]; i++) {
        path_join(src, src_dir, MODELING_FILES[i]);
        path_join(dst, dir, MODELING_FILES[i]);
        mhe_copy_file(src, dst, "export");
    }
    // The model's attention variant (attention/<type>.py) goes along as mhe_attention.py, the
    // name modeling_mhe.py imports (transformers copies only statically imported files).
    snprintf(rel, sizeof rel, "attention/%s.py", attention_type_name(cfg->attention.type));
    path_join(src, src_dir, rel);
    path_join(dst, dir, "mhe_attention.py");
    mhe_copy_file(src, dst, "export");
}


// A relative data.tokenizer is relative to where training ran.  When the checkpoint sits at
// <cwd>/<train.out_dir>/checkpoints/step_N (out_dir relative), that <cwd> is known: returns
// <cwd>/<path> in `out` when it exists, so export works from any directory.
static int training_relative(const char *ckpt_dir, const Config *cfg, const char *path, char *out) {
    char real[PATH_MAX];
    const char *od = cfg->train.out_dir;
    if (path[0] == '/' || !od || !*od || od[0] == '/' || !realpath(ckpt_dir, real)) return -1;
    while (od[0] == '.' && od[1] == '/') od += 2;
    size_t n = strlen(od);
    while (n > 0 && od[n - 1] == '/') n--;
    for (int up = 0; up < 2; up++) {  // strip "/checkpoints/step_N"
        char *slash = strrchr(real, '/');
        if (!slash) return -1;
        *slash = '\0';
    }
    size_t len = strlen(real);
    if (n == 0 || len <= n || real[len - n - 1] != '/' || strncmp(real + len - n, od, n) != 0) return -1;
    real[len - n - 1] = '\0';
    if (snprintf(out, EXPORT_PATH_MAX, "%s/%s", real, path) >= EXPORT_PATH_MAX) return -1;
    struct stat st;
    return stat(out, &st) == 0 ? 0 : -1;
}

static Tokenizer *load_tokenizer(const ExportOptions *opt, const Config *cfg, const char *ckpt_dir,
                                 const char *cfg_path) {
    if (opt->no_tokenizer) return NULL;
    const char *path = opt->tokenizer ? opt->tokenizer : cfg->data.tokenizer;
    if (!path || !*path) {
        fprintf(stderr, "mhetrain export: %s names no data.tokenizer: no tokenizer files written "
                        "(pass --tokenizer PATH to add them)\n", cfg_path);
        return NULL;
    }
    struct stat st;
    char beside_run[EXPORT_PATH_MAX];
    if (stat(path, &st) != 0 && !opt->tokenizer && training_relative(ckpt_dir, cfg, path, beside_run) == 0) {
        fprintf(stderr, "mhetrain export: tokenizer %s taken as %s (relative to the training directory)\n", path,
                beside_run);
        path = beside_run;
    }
    if (stat(path, &st) != 0)
        mhe_fail("export: tokenizer %s (%s) not found: pass --tokenizer PATH or --no-tokenizer", path,
                 opt->tokenizer ? "--tokenizer" : "data.tokenizer of the checkpoint's config");
    Tokenizer *tok = tokenizer_load(path);
    // The model was trained on the kind its config names (train refuses a contradicting file);
    // another kind would ship ids the model never saw under a tokenizer class it does not expect.
    if (tokenizer_kind(tok) != cfg->data.tokenizer_kind)
        mhe_fail("export: tokenizer %s is %s but %s says data.tokenizer_kind %s (a %s model): pass the tokenizer the "
                 "model was trained with, or --no-tokenizer", path,
                 tokenizer_kind(tok) == TOK_WORDPIECE ? "WordPiece" : "byte-level BPE", cfg_path,
                 cfg->data.tokenizer_kind == TOK_WORDPIECE ? "wordpiece" : "bpe", arch_name(cfg->model.arch));
    if (tokenizer_vocab_size(tok) > cfg->model.vocab_size)
        mhe_fail("export: tokenizer %s has %d tokens but the model's vocab_size is %d", path, tokenizer_vocab_size(tok),
                 cfg->model.vocab_size);
    return tok;
}

void export_run(const ExportOptions *opt) {
    char *dir = checkpoint_resolve(opt->checkpoint);
    char why[EXPORT_PATH_MAX + 256];
    if (checkpoint_validate(dir, why, sizeof why) != 0) mhe_fail("export: %s", why);
    char cfg_path[EXPORT_PATH_MAX], path[EXPORT_PATH_MAX];
    path_join(cfg_path, dir, "config.yaml");
    Config cfg;
    config_load(&cfg, cfg_path, 0, NULL);

    const char *bad = export_format_unsupported(&cfg, opt->format);
    if (bad) mhe_fail("export: %s: cannot export as a stock transformers model: %s", cfg_path, bad);
    const ExportFormat format = opt->format == EXPORT_MHETRAIN ? EXPORT_MHETRAIN : export_native_format(&cfg);

    ParamTable t;
    param_table_build(&t, &cfg);
    float *params = mhe_malloc(t.total * sizeof(float));
    checkpoint_load_weights(dir, &t, params);
    Tokenizer *tok = load_tokenizer(opt, &cfg, dir, cfg_path);

    // Replacing the checkpoint's own folder or one holding it (the run) would destroy the source.
    if (mhe_path_within(dir, opt->out_dir))
        mhe_fail("export: --out %s is or holds the checkpoint %s: choose another directory", opt->out_dir, dir);
    MheOutDir out;
    mhe_outdir_begin(&out, opt->out_dir, opt->force, "export");
    const ExportHead head = export_head(&cfg, &t);
    path_join(path, out.staging, "model.safetensors");
    export_write_weights(&cfg, &t, params, format, path);
    path_join(path, out.staging, "config.json");
    export_write_config(&cfg, format, &head, tok, path);
    if (format == EXPORT_MHETRAIN) export_copy_modeling_files(out.staging, &cfg);
    if (tok) export_write_tokenizer(tok, &cfg, out.staging);
    path_join(path, out.staging, "README.md");
    export_write_card(&cfg, format, &head, dir, tok != NULL, path);
    mhe_outdir_commit(&out);

    printf("exported %s (%s %s, %zu parameters) to %s as %s%s%s\n", dir, arch_name(cfg.model.arch),
           attention_type_name(cfg.attention.type), t.total, opt->out_dir, export_class_name(&cfg, format, &head),
           format == EXPORT_MHETRAIN ? " (trust_remote_code=True)" : "", tok ? " with tokenizer files" : "");
    if (tok) tokenizer_free(tok);
    free(params);
    param_table_free(&t);
    config_free(&cfg);
    free(dir);
}

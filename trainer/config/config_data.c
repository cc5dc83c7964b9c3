// The data loader opened from a resolved Config: the only place that knows both (data/ knows
// no Config, so the loader stays usable without the trainer).
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "common/error.h"
#include "common/sha256.h"
#include "data/manifest.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

void loader_options_from_config(LoaderOptions *opt, const Config *cfg, const Tokenizer *tok,
                                uint8_t **continuation) {
    memset(opt, 0, sizeof *opt);
    opt->objective = cfg->objective.type;
    opt->seq_len = cfg->data.seq_len;
    opt->global_batch = cfg->train.global_batch;
    opt->micro_batch = cfg->train.micro_batch;
    opt->shuffle_seed = cfg->data.shuffle_seed;
    opt->mask_seed = cfg->train.seed;
    opt->mask_prob = cfg->objective.mask_prob;
    opt->mask_token_frac = cfg->objective.mask_token_frac;
    opt->random_token_frac = cfg->objective.random_token_frac;
    opt->whole_word = cfg->objective.whole_word;
    opt->vocab_size = cfg->model.vocab_size;
    opt->special = tokenizer_special_ids(tok);
    int tv = tokenizer_vocab_size(tok);
    if (tokenizer_kind(tok) != cfg->data.tokenizer_kind) {
        const char *is = tokenizer_kind(tok) == TOK_WORDPIECE ? "a WordPiece" : "a byte-level BPE";
        const char *want = CONFIG_TOKENIZER_NAMES[cfg->data.tokenizer_kind];
        mhe_fail("%s: %s tokenizer, but data.tokenizer_kind is %s (set data.tokenizer_kind: %s, or point "
                 "data.tokenizer at a %s tokenizer)", cfg->data.tokenizer, is, want,
                 CONFIG_TOKENIZER_NAMES[tokenizer_kind(tok)], want);
    }
    if (tv > cfg->model.vocab_size)
        mhe_fail("%s: the tokenizer has %d tokens but model.vocab_size is %d: ids %d..%d would have no "
                 "embedding row (set model.vocab_size: %d or more)", cfg->data.tokenizer, tv,
                 cfg->model.vocab_size, cfg->model.vocab_size, tv - 1, tv);
    *continuation = NULL;
    if (opt->whole_word) {
        *continuation = mhe_calloc((size_t)opt->vocab_size, 1);
        for (int i = 0; i < tv; i++) (*continuation)[i] = tokenizer_is_continuation(tok, i);
        opt->continuation = *continuation;
    }
}

// The entry as an absolute path when its directory exists (shard prefixes and stems are not
// files themselves), so "./shards/train" and "shards/train" compare equal.
static void canonical_entry(const char *entry, char *out, size_t n) {
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(entry, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - entry) : 1, slash ? entry : ".");
    if (slash == entry) snprintf(dir, sizeof dir, "/");
    if (realpath(dir, real)) snprintf(out, n, "%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : entry);
    else snprintf(out, n, "%s", entry);
}

// The manifest.json prepare wrote beside each data entry, read strictly (a corrupt one exits 2
// naming it); with `warn`, a warning when the shards were tokenized with another tokenizer file
// than data.tokenizer (same bytes = same ids; another file may number tokens differently).
// Returns the number of warnings.
static int check_manifests(const Config *cfg, char *const *entries, int n, bool warn) {
    char tok_sha[SHA256_HEX_LEN] = "";
    struct stat st;
    const char *tok = cfg->data.tokenizer;
    if (warn && tok && stat(tok, &st) == 0 && S_ISREG(st.st_mode) && sha256_file_hex(tok, tok_sha) != 0)
        tok_sha[0] = 0;
    int warnings = 0;
    char seen[8][PATH_MAX + 16];
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 16];
        const char *slash = strrchr(entries[i], '/');
        snprintf(path, sizeof path, "%.*s/manifest.json", slash ? (int)(slash - entries[i]) : 1,
                 slash ? entries[i] : ".");
        bool dup = false;
        for (int k = 0; k < n_seen; k++) dup |= strcmp(seen[k], path) == 0;
        if (dup) continue;
        if (n_seen < 8) snprintf(seen[n_seen++], sizeof seen[0], "%s", path);
        ManifestTokenizer m;
        if (!manifest_read_tokenizer(path, &m) || !warn || !tok_sha[0] || !m.tokenizer_sha256[0]) continue;
        if (strcmp(m.tokenizer_sha256, tok_sha) != 0) {
            fprintf(stderr,
                    "mhetrain: warning: %s: these shards were tokenized with %s (sha256 %.12s…), not with "
                    "data.tokenizer %s (sha256 %.12s…): unless both number the tokens alike, ids stand for "
                    "other tokens\n", path, m.tokenizer_path, m.tokenizer_sha256, tok, tok_sha);
            warnings++;
        }
    }
    return warnings;
}

int config_data_warnings(const Config *cfg) {
    char *entries[2 * MHE_MAX_PATHS];
    int n_entries = 0;
    for (int i = 0; i < cfg->data.n_train; i++) entries[n_entries++] = cfg->data.train[i];
    for (int i = 0; i < cfg->data.n_valid; i++) entries[n_entries++] = cfg->data.valid[i];
    int n = check_manifests(cfg, entries, n_entries, true);
    if (cfg->data.tokenizer && cfg->data.tokenizer[0]) {
        Tokenizer *tok = tokenizer_load(cfg->data.tokenizer);
        int tv = tokenizer_vocab_size(tok);
        tokenizer_free(tok);
        if (tv < cfg->model.vocab_size) {
            fprintf(stderr,
                    "mhetrain: warning: model.vocab_size %d is larger than the %d tokens of %s: %d embedding rows "
                    "are never used (set model.vocab_size: %d unless the padding is deliberate)\n",
                    cfg->model.vocab_size, tv, cfg->data.tokenizer, cfg->model.vocab_size - tv, tv);
            n++;
        }
    }
    for (int i = 0; i < cfg->data.n_valid; i++)
        for (int j = 0; j < cfg->data.n_train; j++) {
            char a[2 * PATH_MAX], b[2 * PATH_MAX];
            canonical_entry(cfg->data.valid[i], a, sizeof a);
            canonical_entry(cfg->data.train[j], b, sizeof b);
            if (strcmp(a, b) != 0) continue;
            fprintf(stderr,
                    "mhetrain: warning: data.valid %s is also in data.train: the validation loss measures "
                    "training data\n",
                    cfg->data.valid[i]);
            n++;
        }
    return n;
}

int config_valid_data_warnings(const Config *cfg) {
    return check_manifests(cfg, cfg->data.valid, cfg->data.n_valid, true);
}

Loader *loader_open_config(const Config *cfg, bool valid) {
    if (!cfg->data.tokenizer || !cfg->data.tokenizer[0])
        mhe_fail("%s: data.tokenizer is needed to read the special tokens", cfg->source ? cfg->source : "config");
    Tokenizer *tok = tokenizer_load(cfg->data.tokenizer);
    LoaderOptions opt;
    uint8_t *cont;
    loader_options_from_config(&opt, cfg, tok, &cont);
    tokenizer_free(tok);
    if (valid) {
        // The validation split is ordered and masked the same way in every run, whatever
        // train.seed and data.shuffle_seed: runs with different seeds (compare.sh --seeds) are
        // scored on the same positions, so their spread is the training's, not the scoring's.
        opt.shuffle_seed = 0x76616c6964ull;  // "valid"
        opt.mask_seed = 0x76616c6964ull;
        if (cfg->objective.eval_mask_prob > 0) opt.mask_prob = cfg->objective.eval_mask_prob;
    }
    int n = valid ? cfg->data.n_valid : cfg->data.n_train;
    check_manifests(cfg, valid ? cfg->data.valid : cfg->data.train, n, false);
    if (n == 0) mhe_fail("%s: data.%s lists no shards", cfg->source ? cfg->source : "config",
                         valid ? "valid" : "train");
    Loader *l = loader_open(n, valid ? cfg->data.valid : cfg->data.train, &opt);
    if (cont) loader_own_continuation(l, cont);  // the caller has nothing to free
    return l;
}

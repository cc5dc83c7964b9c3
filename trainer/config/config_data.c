// The data loader opened from a resolved Config: the only place that knows both (data/ knows
// no Config, so the loader stays usable without the trainer).
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/config/config.h"

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
    if (tv > cfg->model.vocab_size)
        mhe_fail("%s: tokenizer has %d tokens but model.vocab_size is %d", cfg->data.tokenizer,
                 tv, cfg->model.vocab_size);
    *continuation = NULL;
    if (opt->whole_word) {
        *continuation = mhe_calloc((size_t)opt->vocab_size, 1);
        for (int i = 0; i < tv; i++) (*continuation)[i] = tokenizer_is_continuation(tok, i);
        opt->continuation = *continuation;
    }
}

Loader *loader_open_config(const Config *cfg, bool valid) {
    if (!cfg->data.tokenizer || !cfg->data.tokenizer[0])
        mhe_fail("%s: data.tokenizer is needed to read the special tokens", cfg->source ? cfg->source : "config");
    Tokenizer *tok = tokenizer_load(cfg->data.tokenizer);
    LoaderOptions opt;
    uint8_t *cont;
    loader_options_from_config(&opt, cfg, tok, &cont);
    tokenizer_free(tok);
    int n = valid ? cfg->data.n_valid : cfg->data.n_train;
    if (n == 0) mhe_fail("%s: data.%s lists no shards", cfg->source ? cfg->source : "config",
                         valid ? "valid" : "train");
    Loader *l = loader_open(n, valid ? cfg->data.valid : cfg->data.train, &opt);
    if (cont) loader_own_continuation(l, cont);  // the caller has nothing to free
    return l;
}

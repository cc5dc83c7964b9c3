// mhetrain eval: evaluate a checkpoint on the validation split.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "common/error.h"
#include "data/loader.h"
#include "kernels/backend_info.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/metrics.h"
#include "trainer/io/run_lock.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"
#include "trainer/train/evaluate.h"
#include "trainer/train/precision_auto.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/reducer_setup.h"
#include "trainer/model/model.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain eval CHECKPOINT [key.path=value ...]\n"
            "\n"
            "Evaluates a checkpoint (a step_* directory, or a run's output directory for its newest\n"
            "valid checkpoint) on the validation split of its config: MLM loss and masked-token\n"
            "accuracy, or CLM loss and perplexity, over train.final_eval_batches global batches (default\n"
            "0: every sample of the split once).  Overrides apply to the checkpoint's config, e.g.\n"
            "data.valid=[other/valid] train.final_eval_batches=50.  Prints one JSON line.\n");
}

int cmd_eval(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-') {
        usage(stderr);
        mhe_fail("eval: missing the checkpoint");
    }
    Comm *comm = comm_init(&argc, &argv, 0.0f);
    int lock = run_lock_read(argv[1], "eval");
    char *dir = checkpoint_resolve(argv[1]);
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
    Config cfg;
    config_load(&cfg, cfg_path, argc - 2, argv + 2);
    comm_set_timeout(comm, cfg.dist.timeout_s);
    precision_resolve(&cfg, comm, NULL);  // the checkpoint's choice, unless overridden with auto
    char *yaml = config_yaml_text(&cfg);  // under mpirun every rank must evaluate the same thing
    rank_agree(comm, "config", yaml);
    free(yaml);
    if (cfg.task.type != TASK_NONE)
        mhe_fail("%s: a fine-tuned task model (task.type is set): `mhetrain finetune` scores it on task.dev_file",
                 cfg_path);
    if (cfg.data.n_valid == 0) mhe_fail("%s: data.valid names no validation shards", cfg_path);
    Backend *be = backend_for_config(&cfg, comm_local_rank(comm), comm_rank(comm) == 0);
    Model *m = model_create(&cfg, be, cfg.train.micro_batch, cfg.data.seq_len);
    const ParamTable *t = model_param_table(m);
    float *host = mhe_malloc(t->total * sizeof(float));
    checkpoint_load_weights(dir, t, host);
    model_set_params(m, host);
    if (comm_rank(comm) == 0) config_valid_data_warnings(&cfg);  // as train does
    Loader *valid = loader_open_config(&cfg, true);
    EvalResult r = evaluate_split(m, valid, comm, cfg.train.final_eval_batches, NULL);
    // Valid JSON whatever the numbers: non-finite ones are null and "nonfinite" says so.
    const double metric = cfg.objective.type == OBJ_MLM ? r.accuracy : r.perplexity;
    const int nonfinite = !isfinite(r.loss) || !isfinite(metric);
    if (comm_rank(comm) == 0) {
        fputs("{\"checkpoint\": ", stdout);
        json_put_string(stdout, dir);
        fputs(", \"valid_loss\": ", stdout);
        json_put_number(stdout, "%.8g", r.loss);
        printf(", \"%s\": ", cfg.objective.type == OBJ_MLM ? "valid_accuracy" : "valid_perplexity");
        json_put_number(stdout, "%.8g", metric);
        printf(", \"tokens\": %lld, \"nonfinite\": %s}\n", (long long)r.tokens, nonfinite ? "true" : "false");
        fflush(stdout);
        if (nonfinite) fprintf(stderr, "mhetrain: eval: %s: the validation loss is not finite (NaN or infinite weights?)\n", dir);
    }
    loader_close(valid);
    free(host);
    model_free(m);
    be->destroy(be);
    config_free(&cfg);
    free(dir);
    run_lock_release(lock);
    comm_finalize(comm);
    return nonfinite ? 1 : 0;
}

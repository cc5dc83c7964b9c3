// mhetrain convert: a trained mha checkpoint re-parametrized as collab, gqa or mqa
// (the math is trainer/model/convert.c; this file loads and saves).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/fs.h"
#include "trainer/cli/commands.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/run_lock.h"
#include "trainer/model/convert.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain convert CHECKPOINT --to collab --collab-dim D~ --out DIR [--seed S] [--tol T]\n"
            "                        [--max-iter N]\n"
            "       mhetrain convert CHECKPOINT --to gqa --groups G --out DIR\n"
            "       mhetrain convert CHECKPOINT --to mqa --out DIR\n"
            "\n"
            "Re-parametrizes a trained mha model.  collab: per layer, CP/PARAFAC (ALS, LAPACK solves) of\n"
            "the heads' bilinear forms W_Q^(h) W_K^(h)^T at rank D~; the query bias becomes the content\n"
            "bias; values and output are copied; D~ = n*d is the exact concatenate layout.  The score\n"
            "scale 1/sqrt(head_dim) is kept.  gqa/mqa: K and V heads mean-pooled within groups.\n"
            "Writes DIR/checkpoints/step_00000000 and DIR/config.yaml (eval, export, params,\n"
            "train.init_from accept them) and prints each layer's relative reconstruction error.\n"
            "\n"
            "  CHECKPOINT     a step_* directory, or a run's output directory (its newest checkpoint)\n"
            "  --out DIR      written beside DIR and renamed into place when complete\n"
            "  --force        replace a non-empty DIR (whole; a failed convert leaves it untouched)\n"
            "  --seed S       ALS random columns (default 0)\n"
            "  --tol T        stop when the relative error improves by less than T (default 1e-7)\n"
            "  --max-iter N   ALS sweep cap (default 500)\n");
}

static long parse_long(const char *opt, const char *v) {
    return (long)cli_int_option("convert", opt, v, 0, INT32_MAX);
}

int cmd_convert(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *ckpt = NULL, *out = NULL, *to = NULL;
    int force = 0;
    ConvertOptions o = {.seed = 0, .tol = 1e-7, .max_iter = 500};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int v = i + 1 < argc;
        if (strcmp(a, "--out") == 0 && v) out = argv[++i];
        else if (strcmp(a, "--force") == 0) force = 1;
        else if (strcmp(a, "--to") == 0 && v) to = argv[++i];
        else if (strcmp(a, "--collab-dim") == 0 && v) o.collab_dim = (int)parse_long(a, argv[++i]);
        else if (strcmp(a, "--groups") == 0 && v) o.groups = (int)parse_long(a, argv[++i]);
        else if (strcmp(a, "--seed") == 0 && v) o.seed = (uint64_t)cli_int_option("convert", a, argv[++i], 0, INT64_MAX);
        else if (strcmp(a, "--max-iter") == 0 && v) o.max_iter = (int)parse_long(a, argv[++i]);
        else if (strcmp(a, "--tol") == 0 && v) o.tol = cli_real_option("convert", a, argv[++i], 0, 1);
        else if (a[0] == '-') {
            usage(stderr);
            mhe_fail("convert: unknown option or missing value: %s", a);
        } else if (!ckpt) ckpt = a;
        else {
            usage(stderr);
            mhe_fail("convert: unexpected argument %s", a);
        }
    }
    if (!ckpt || !out || !to) {
        usage(stderr);
        mhe_fail("convert: %s", !ckpt ? "missing the checkpoint" : !out ? "missing --out DIR" : "missing --to TYPE");
    }
    if (strcmp(to, "collab") == 0) {
        o.to = ATTN_COLLAB;
        if (o.collab_dim <= 0) mhe_fail("convert: --to collab needs --collab-dim D~ > 0");
    } else if (strcmp(to, "gqa") == 0) {
        o.to = ATTN_GQA;
        if (o.groups <= 0) mhe_fail("convert: --to gqa needs --groups G > 0");
    } else if (strcmp(to, "mqa") == 0) {
        o.to = ATTN_MQA;
    } else {
        mhe_fail("convert: --to must be collab, gqa or mqa, got %s", to);
    }
    if (o.max_iter < 1) mhe_fail("convert: --max-iter must be >= 1");

    run_lock_read(ckpt, "convert");  // held until exit
    char *dir = checkpoint_resolve(ckpt);
    char why[4352], cfg_path[4200];
    if (checkpoint_validate(dir, why, sizeof why) != 0) mhe_fail("convert: %s", why);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
    Config src, dst;
    config_load(&src, cfg_path, 0, NULL);
    config_load(&dst, cfg_path, 0, NULL);
    convert_config(&dst, &o, cfg_path);
    ParamTable st, dt;
    param_table_build(&st, &src);
    param_table_build(&dt, &dst);
    float *sp = mhe_malloc(st.total * sizeof(float)), *dp = mhe_calloc(dt.total, sizeof(float));
    checkpoint_load_weights(dir, &st, sp);

    if (mhe_path_within(dir, out))
        mhe_fail("convert: --out %s is or holds the checkpoint %s: choose another directory", out, dir);
    MheOutDir od;
    mhe_outdir_begin(&od, out, force, "convert");
    free(dst.train.out_dir);
    dst.train.out_dir = mhe_strdup(od.target_abs);
    free(dst.train.init_from);
    dst.train.init_from = mhe_strdup("");

    ConvertLayerReport *rep = mhe_calloc((size_t)src.model.layers, sizeof *rep);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    convert_params(&src, &st, sp, &dst, &dt, dp, &o, rep);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const int n = src.model.heads, d = src.model.head_dim;
    printf("convert %s: mha (n=%d, d=%d) -> %s", dir, n, d, attention_type_name(dst.attention.type));
    if (o.to == ATTN_COLLAB)
        printf(" D~=%d%s; score scale kept at 1/sqrt(d)=%.6g\n", dst.attention.collab_dim,
               dst.attention.collab_dim == n * d ? " (exact concatenate layout)" : "", 1.0 / sqrt((double)d));
    else
        printf(" with %d K/V head group(s) (mean-pooled)\n", o.to == ATTN_MQA ? 1 : o.groups);
    for (int l = 0; l < src.model.layers; l++) {
        if (o.to == ATTN_COLLAB)
            printf("layer %d: relative reconstruction error %.6e  ALS sweeps %d  %.3f s\n", l, rep[l].rel_error,
                   rep[l].iterations, rep[l].seconds);
    }
    printf("attention weights per layer: %zu -> %zu; total time %.3f s\n", param_attention_weights_per_layer(&st),
           param_attention_weights_per_layer(&dt),
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));

    checkpoint_save_new_run(od.staging, &dst, &dt, dp, "convert");
    mhe_outdir_commit(&od);
    printf("wrote %s/checkpoints/step_00000000\n", out);
    free(rep), free(sp), free(dp), free(dir);
    param_table_free(&st), param_table_free(&dt);
    config_free(&src), config_free(&dst);
    return 0;
}

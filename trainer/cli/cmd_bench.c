// mhetrain bench: a full training step (forward, backward, gradient norm, AdamW) on random
// tokens, timed by op class, with MFU against the matmul rate this machine reaches (measured at
// startup) on the CPU, against the card's data-sheet peak on a GPU.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "kernels/ops.h"
#include "trainer/cli/bench_gpu.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"
#include "kernels/gpu_peak.h"
#include "trainer/train/peak.h"
#include "trainer/train/peak_nominal.h"
#include "trainer/train/precision_auto.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain bench CONFIG.yaml [key.path=value ...] [--steps N] [--gpu a100|h100|h200]\n"
            "\n"
            "Runs training steps (forward, backward, gradient norm and clip, optimizer update with\n"
            "optim.*) on random tokens at the config's train.micro_batch x data.seq_len and prints\n"
            "tokens/s, the step time split by op class, achieved GFLOP/s, MFU (on the CPU against the\n"
            "machine's measured matmul rate, on a GPU against the card's dense data-sheet peak or\n"
            "MHE_GPU_PEAK_TFLOPS), and peak memory (runtime.device selects the CPU or CUDA backend).\n"
            "The MLM head runs only on the scored positions, as in training.  The last line,\n"
            "'bench-result: ...', is key=value pairs for scripts.\n"
            "\n"
            "  key.path=value   override a config value, e.g. attention.type=mhe_mul\n"
            "  --steps N        timed steps after the warm-up (1 step; 3 on CUDA) (default 5)\n"
            "  --gpu a100|h100|h200  with runtime.device=cuda: also predict the step on that GPU from\n"
            "                   every kernel and library call of one step (the cost model of\n"
            "                   kernels/cuda/README.md).  Without a GPU the emulated backend\n"
            "                   (mhetrain_emu) records one step without running it\n"
            "  --ranks N        with --gpu: the step data-parallel over N GPUs of one node: each\n"
            "                   gradient bucket (dist.bucket_mb) all-reduced by NCCL on a second\n"
            "                   stream as the backward pass finishes it; prints compute,\n"
            "                   communication, exposed communication, the step with and without\n"
            "                   overlap and the communication stream's timeline\n"
            "  --no-overlap     with --ranks: start every all-reduce after the backward pass\n"
            "  --timeline FILE  with --gpu: write the predicted step's per-stream timeline (TSV)\n"
            "  --top N          with --gpu: list the N most expensive calls (default 10, at most 40)\n"
            "  -h, --help       this help\n");
}

// The measured half of the report: time per op class, MFU against the nominal peak (the GPU's
// data sheet, or the CPU cores' nominal rate: peak_nominal.h) with the measured matmul ceiling
// beside it, memory, and the bench-result line.
// `prof` covers `profiled` steps: the timed ones on the CPU; on a GPU one extra step, since its
// per-op synchronisation would inflate the timed steps (its classes then need not add up to them).
static void bench_print_measured(const Config *cfg, const Backend *be, Model *m, const OpProfile *prof, int steps, int profiled,
                                 double t_total, double t_optim, double step, double flops,
                                 double peak, int sheet, double nominal, const char *nominal_desc, float loss) {
    const int B = cfg->train.micro_batch, T = cfg->data.seq_len;
    const double gflops = flops / step / 1e9;
    // Against the nominal peak where it is known, else (an unknown CPU) the measured ceiling.
    double ref = sheet ? peak : nominal > 0 ? nominal : peak;
    const double probe = ref;
    const double mfu = peak_mfu(&ref, gflops);
    const int outran = probe > 0 && gflops > probe;
    static const char *names[OPC_COUNT] = {"matmul", "attention", "norm/activation", "loss", "other"};
    double accounted = 0;
    for (int c = 0; c < OPC_COUNT; c++) accounted += prof->seconds[c];
    printf("loss (random tokens): %.4f\n", loss);
    printf("step time: %.2f ms   tokens/s: %.0f\n", 1e3 * step, (double)B * T / step);
    const int separate = profiled != steps;
    printf("time by op class (per step%s):\n",
           accounted <= 0 ? "; this backend does not time its ops, all shown as other"
           : separate     ? "; from one more step synchronised before and after every op, so they add up to more"
                          : "");
    for (int c = 0; c < OPC_COUNT; c++) {
        double sec = prof->seconds[c] / profiled;
        // host code, host optimizer: what the timed step spent outside the timed ops
        if (c == OPC_OTHER && t_total > accounted / profiled * steps) sec += (t_total / steps - accounted / profiled);
        printf("  %-16s %8.2f ms  %5.1f%%", names[c], 1e3 * sec, 100.0 * sec / step);
        if (prof->flops[c] > 0) printf("  %7.2f GFLOP/s", prof->flops[c] / prof->seconds[c] / 1e9);
        printf("\n");
    }
    printf("  (gradient norm and optimizer step %.2f ms, %s, included above)\n", 1e3 * t_optim / steps,
           cfg->optim.name == OPT_ADAMW ? "adamw" : "lamb");
    printf("model flops per step: %.3f GFLOP   achieved: %.2f GFLOP/s\n", flops / 1e9, gflops);
    if (!sheet && nominal > 0)
        printf("nominal peak (%s, %s): %.2f GFLOP/s\n", cfg->runtime.precision == PREC_BF16 ? "bf16" : "fp32",
               nominal_desc, nominal);
    printf("matmul peak (%s %s%s): %.2f GFLOP/s   MFU: %.1f%% of the %s%s\n",
           sheet ? "the GPU's data sheet, dense" : "measured ceiling, backend matmul",
           cfg->runtime.precision == PREC_BF16 ? "bf16" : "fp32", sheet ? "" : ", best square size up to 4096^3", peak,
           100.0 * mfu, sheet ? "data sheet" : nominal > 0 ? "nominal peak" : "measured ceiling (nominal unknown)",
           outran ? " (the step outran it: a bound, not a measurement)" : "");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("memory: arena %.2f MiB, params+grads %.2f MiB, peak RSS %.2f MiB\n",
           model_arena_bytes(m) / 1048576.0, model_state_bytes(m) / 1048576.0, ru.ru_maxrss / 1024.0);
    // The attention core's own rate and share of the step (from the profiled step), the figures
    // the CPU attention work is judged by.
    const double attn_s = prof->seconds[OPC_ATTENTION] / profiled;
    const double attn_gflops = prof->seconds[OPC_ATTENTION] > 0
                                   ? prof->flops[OPC_ATTENTION] / prof->seconds[OPC_ATTENTION] / 1e9 : 0;
    printf("bench-result: tokens_per_s=%.1f step_ms=%.3f gflops=%.3f peak_gflops=%.3f mfu=%.4f "
           "peak_rss_mib=%.1f loss=%.4f mfu_outran=%d attn_gflops=%.2f attn_share=%.4f act=%s nominal_gflops=%.3f "
           "precision=%s\n",
           (double)B * T / step, 1e3 * step, gflops, peak, mfu, ru.ru_maxrss / 1024.0, loss, outran, attn_gflops,
           attn_s / step, dtype_name(be->act), sheet ? peak : nominal,
           cfg->runtime.precision == PREC_BF16 ? "bf16" : "fp32");
}

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    CliConfigArgs args = {0};
    int steps = 5;
    const char *gpu = NULL, *timeline = NULL;
    int ranks = 0, overlap = 1, top = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0) {
            if (i + 1 >= argc) mhe_fail("bench: --steps needs a value");
            steps = (int)cli_int_option("bench", "--steps", argv[++i], 1, 1000000);
        } else if (strcmp(argv[i], "--gpu") == 0) {
            if (i + 1 >= argc) mhe_fail("bench: --gpu needs a value (a100, h100 or h200)");
            gpu = argv[++i];
        } else if (strcmp(argv[i], "--top") == 0) {
            if (i + 1 >= argc) mhe_fail("bench: --top needs a value");
            top = (int)cli_int_option("bench", "--top", argv[++i], 1, COST_TOP);
        } else if (strcmp(argv[i], "--ranks") == 0) {
            if (i + 1 >= argc) mhe_fail("bench: --ranks needs a value");
            ranks = (int)cli_int_option("bench", "--ranks", argv[++i], 1, 65536);
        } else if (strcmp(argv[i], "--no-overlap") == 0) {
            overlap = 0;
        } else if (strcmp(argv[i], "--timeline") == 0) {
            if (i + 1 >= argc) mhe_fail("bench: --timeline needs a file name");
            timeline = argv[++i];
        } else {
            cli_take_config_arg(&args, "bench", argv[i], usage);
        }
    }
    cli_require_config(&args, "bench", usage);
    if ((ranks || timeline) && !gpu) mhe_fail("bench: --ranks and --timeline predict a GPU step; add --gpu a100|h100|h200");
    if (!overlap && !ranks) mhe_fail("bench: --no-overlap needs --ranks N");
    const char *path = args.path;
    Config cfg;
    config_load(&cfg, path, args.n_overrides, args.overrides);
    if (!gpu) precision_resolve(&cfg, NULL, NULL);
    else if (cfg.runtime.precision == PREC_AUTO) cfg.runtime.precision = PREC_BF16;  // auto on cuda
    const int B = cfg.train.micro_batch, T = cfg.data.seq_len, V = cfg.model.vocab_size;

    const int cuda = cfg.runtime.device == DEVICE_CUDA;
    const GpuSpec *spec = NULL;
    int record_only = 0;
    if (gpu) {
        if (!cuda) mhe_fail("bench: --gpu predicts the CUDA backend; add runtime.device=cuda");
        if (!backend_cuda_compiled())
            mhe_fail("bench: --gpu needs the CUDA backend (rebuild with -DMHE_CUDA=ON where nvcc is installed)");
        spec = gpu_spec_find(gpu);
        if (!spec) mhe_fail("bench: --gpu '%s' is not a known GPU (a100, h100 or h200)", gpu);
        bench_gpu_reexec_emulated(argc, argv);
        record_only = backend_cuda_cost_dry_run(1);
        if (record_only) steps = 1;  // nothing runs: one recorded step is the prediction
    }
    Backend *be = backend_for_config(&cfg, 0, 1);
    // The ceiling (DESIGN.md §9), as training counts it: on the CPU the backend's own matmul at the
    // precision in use; on a GPU the card's dense data-sheet peak, since a probe through the
    // backend's matmul op times operand conversion and a synchronisation per call (the H200 read
    // 82-101 TFLOP/s that way, CALIBRATION.md run 4); an unknown card has no MFU (never a probe).
    // A record-only run executes nothing, so it has no ceiling.
    int peak_n = 0;
    double peak = 0;
    if (!record_only && cuda) peak = backend_cuda_peak_flops(0, cfg.runtime.precision == PREC_BF16, NULL) / 1e9;
    const int sheet = peak > 0;
    if (!record_only && !sheet) peak = peak_matmul_ceiling(be, &peak_n, NULL);
    char nominal_desc[192] = "", lib[128];
    double nominal = 0;
    if (!cuda) {
        backend_cpu_library(lib, sizeof lib);
        nominal = peak_nominal_cpu(omp_get_max_threads(), lib, cfg.runtime.precision == PREC_BF16, nominal_desc,
                                   sizeof nominal_desc);
        peak_nominal_floor(&nominal, peak, nominal_desc, sizeof nominal_desc);
    }
    Model *m = model_create(&cfg, be, B, T);
    model_init_params(m, cfg.train.seed);
    model_set_full_logits(m, 0);  // as training runs it: the head only on scored positions

    int32_t *ids = mhe_malloc((size_t)B * T * sizeof *ids), *labels = mhe_malloc((size_t)B * T * sizeof *labels);
    Rng r = rng_stream(cfg.train.seed, 0xbe4c, 0);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        // MLM scores the selected fraction; CLM scores every position.
        int scored = cfg.objective.type == OBJ_CLM || rng_next_uniform(&r) < cfg.objective.mask_prob;
        labels[i] = scored ? (int32_t)(rng_next(&r) % (uint64_t)V) : -100;
    }
    labels[0] = 1;  // at least one scored position

    printf("bench: %s arch=%s attention=%s fast_path=%d layers=%d D=%d n=%d d=%d V=%d params=%zu\n",
           cfg.source ? cfg.source : path, arch_name(cfg.model.arch), attention_type_name(cfg.attention.type),
           (int)cfg.attention.fast_path, cfg.model.layers, cfg.model.hidden, cfg.model.heads,
           cfg.model.head_dim, V, model_param_count(m));
    // CUDA makes its one-time state in the first step (the weights' bf16 copies,
    // kernels/cuda/cuda_weight_copy.cu; cuBLASLt's plans; the grow-only scratch); three warm-up
    // steps, as when bf16 twins needed them to settle, keep the figures comparable with earlier
    // sessions'.
    const int warm = cuda ? 3 : 1;
    printf("bench: backend=%s micro_batch=%d seq_len=%d threads=%d steps=%d (after %d warm-up) recompute=%s\n",
           be->name, B, T, omp_get_max_threads(), steps, warm, recompute_name(cfg.train.recompute));
    if (!cuda) printf("bench: cpu_isa=%s (the CPU backend's element code; MHE_CPU_ISA=avx2|baseline forces a lower level)\n",
                      backend_cpu_isa(be));
    if (!cuda) {
        char lib[128];
        backend_cpu_library(lib, sizeof lib);
        printf("bench: matmul library: %s (ONEDNN_MAX_CPU_ISA lowers its instruction set)\n", lib);
    }

    // The optimizer as training runs it: host AdamW on the CPU, the backend's kernels on CUDA
    // (over this rank's shard with dist.zero: 1 and --ranks).
    const ParamTable *table = model_param_table(m);
    BenchDist *dist = bench_gpu_dist_create(ranks, overlap, &cfg, be, m);
    size_t begin, end;
    bench_gpu_dist_shard(dist, table->total, &begin, &end);
    OptimState opt;
    optim_state_init(&opt, table, begin, end);
    float *dm = NULL, *dv = NULL, *du = NULL;
    if (cuda) {
        dm = be->alloc(be, (end - begin) * sizeof(float));
        dv = be->alloc(be, (end - begin) * sizeof(float));
        du = be->alloc(be, (end - begin) * sizeof(float));
    }
    const float lr = 1e-5f;  // small: random tokens, the loss must stay near ln V

    float loss = 0;
    OpProfile prof;
    double t_total = 0, t_optim = 0;
    CostReport cost;
    // On a GPU the per-op profile synchronises before and after every op, which would inflate the
    // timed steps: they run without it, and one more step after them is profiled for the op
    // classes.  On the CPU the profile costs nothing and covers the timed steps.
    const int separate = cuda && !record_only, profiled_steps = separate ? 1 : steps;
    memset(&prof, 0, sizeof prof);
    for (int s = 0; s < warm + steps + separate; s++) {
        be->profile = (separate ? s == warm + steps : s >= warm) ? &prof : NULL;
        if (s == warm && spec) backend_cuda_cost_start();  // the first steady-state step
        double t0 = omp_get_wtime();
        model_zero_grad(m);
        loss = model_forward(m, ids, NULL, NULL, labels, B, T, 1);
        model_backward(m, 0);
        bench_gpu_dist_finish(dist);
        double t1 = omp_get_wtime();
        // The gradient norm and its clip, as trainer.c does every step (it logs the norm even
        // with clipping off): one pass over this rank's gradients.
        const double gnorm = sqrt(be->sum_squares(be, model_grads(m) + begin, end - begin));
        const float coef = optim_clip_coef(gnorm, cfg.optim.clip_norm);
        if (cuda) {
            optim_step_backend(be, &opt, &cfg.optim, table, model_params(m), model_grads(m), dm, dv, du,
                               lr, coef, NULL, NULL);
        } else {
            optim_step_scaled(&opt, &cfg.optim, table, model_params(m), model_grads(m), lr, coef, NULL, NULL);
        }
        bench_gpu_dist_gather(dist, model_params(m));
        be->synchronize(be);
        if (spec && s == warm) backend_cuda_cost_stop(spec, &cost);
        double t2 = omp_get_wtime();
        if (s >= warm && s < warm + steps) {
            t_total += t2 - t0;
            t_optim += t2 - t1;
        }
    }
    be->profile = NULL;
    bench_gpu_dist_free(dist);
    if (timeline && backend_cuda_cost_write_timeline(timeline) != 0)
        mhe_fail("bench: cannot write the timeline to %s: %s", timeline, strerror(errno));

    const double step = t_total / steps;
    const double flops = model_step_flops(m, B, T);
    if (spec) {
        // Record-only: the recorded step's wall time is the host's own cost of issuing it.
        bench_gpu_report(spec, cfg.runtime.precision == PREC_BF16, record_only, &cost, flops, (long)B * T,
                         record_only ? NULL : &prof, profiled_steps, top, record_only ? t_total / steps : 0.0);
        // The erf GELU is the one activation cuBLASLt cannot fuse: say what it costs here.
        double gelu_s = 0;
        for (int i = 0; i < cost.n_top; i++)
            if (strncmp(cost.top[i].label, "gelu_", 5) == 0) gelu_s += cost.top[i].seconds;
        if (cfg.model.activation == ACT_GELU_ERF && gelu_s > 0)
            printf("gelu: model.activation=gelu (erf) runs as separate kernels, %.3f ms of the step: cuBLASLt's\n"
                   "  GELU epilogues compute the tanh form; model.activation=gelu_tanh (Google's original BERT,\n"
                   "  GPT-2) fuses it into the FFN matmuls\n",
                   1e3 * gelu_s);
    }
    // MFU counts the model's flops only; the recomputed forward is in the step time.
    const double again = model_recompute_flops(m, B, T);
    if (again > 0) {
        printf("recompute: train.recompute=%s reruns %.3f TFLOP of forward per step (not in MFU)",
               recompute_name(cfg.train.recompute), again / 1e12);
        if (spec)
            printf("; model + recompute: %.1f%% of the %s's peak", 100.0 * (flops + again) / cost.seconds /
                   (cfg.runtime.precision == PREC_BF16 ? spec->bf16_flops : spec->fp32_flops), spec->name);
        printf("\n");
    }
    // In record-only mode the host timings measured nothing but the recording.
    if (!record_only)
        bench_print_measured(&cfg, be, m, &prof, steps, profiled_steps, t_total, t_optim, step, flops, peak, sheet, nominal, nominal_desc, loss);
    if (cuda) {
        be->free(be, dm);
        be->free(be, dv);
        be->free(be, du);
    }
    optim_state_free(&opt);

    free(ids);
    free(labels);
    model_free(m);
    be->destroy(be);
    config_free(&cfg);
    return 0;
}

// runtime.precision: auto (issue 49).  On CUDA it is bf16.  On the CPU it is bf16 only where bf16
// matmuls beat fp32's on this machine: without AMX, AVX-512's bf16 dot product does no more
// multiply-adds per cycle than fp32 FMAs and the conversions cost extra, so bf16 ran 14-39% slower
// (Emerald Rapids without AMX, AMD Zen 4); with AMX it is several times faster.  Both rates are
// measured on the model's own linear-layer products (peak_products_gflops), alternating twice,
// and remembered per machine in a cache file, so a machine pays for the measurement once; not
// when the load average exceeds 1.5x the CPUs (rates taken among other jobs are not the machine's).
#ifndef MHE_TRAINER_PRECISION_AUTO_H
#define MHE_TRAINER_PRECISION_AUTO_H

#include <stddef.h>

#include "comm/comm.h"
#include "trainer/config/config.h"

typedef struct {
    double fp32_gflops, bf16_gflops;  // the model's products at each precision; 0: cannot run here
    int bf16_native;                  // 0: this CPU emulates bf16
} PrecisionRates;

// bf16 must beat fp32 by this factor: within it the measurement's noise would decide (an emulated
// bf16 read 83.6 against fp32's 82.4 GFLOP/s on AMD Zen 4 under ONEDNN_MAX_CPU_ISA=AVX2, where
// the rest of a bf16 step pays software conversions), and fp32 is the reference.
#define PRECISION_BF16_MARGIN 1.05

// The choice from measured rates: bf16 only when its rate is 5% above fp32's; when one precision
// cannot run (rate 0) the other, saying so.  `why` gets the reason, one clause ("bf16 matmuls
// 153 GFLOP/s against fp32's 242 on the model's products (0.63x)").
Precision precision_choose(const PrecisionRates *r, char *why, size_t len);

// The cache: one line per machine and model shape, "KEY<TAB>fp32<TAB>bf16<TAB>native".
// precision_cache_read: 1 found (*r filled), 0 absent (no file, or no line for the key), -1 the
// file has a line that does not parse (`why`: file, line and what was expected).
int precision_cache_read(const char *path, const char *key, PrecisionRates *r, char *why, size_t len);
// Replaces the key's line (and any line that does not parse), keeping the others; written to a
// temporary file and renamed into place, so a reader never sees half a file.  0 on success.
int precision_cache_write(const char *path, const char *key, const PrecisionRates *r);
// The cache file: $MHE_CACHE_DIR/precision.tsv, else $XDG_CACHE_HOME/mhetrain/..., else
// $HOME/.cache/mhetrain/...; NULL when none of them is set.
const char *precision_cache_path(char *buf, size_t len);

// The machine and model a measurement holds for: CPU model, the backend's ISA level, oneDNN's
// version and ISA, the thread count, and the product shapes ("M x N x K" list).
void precision_machine_key(const char *cpu_model, const char *isa, const char *library, int threads,
                           const char *shapes, char *buf, size_t len);

// The choice saved by the run a resume would continue: `from` is a checkpoint directory or a run's
// out_dir (its newest checkpoints/step_*).  PREC_FP32 or PREC_BF16, or -1 when there is no saved
// checkpoint or it names no choice; `ckpt` gets the checkpoint directory read.
int precision_saved(const char *from, char *ckpt, size_t len);

// Resolves runtime.precision for a run (train, finetune, eval, bench) before its backend exists:
// auto becomes fp32 or bf16 and rank 0 prints what it chose and why in one line (resume_from:
// where a resume would start, NULL for none: its checkpoint's choice is kept, saying so when this
// machine would now choose otherwise).  An explicit bf16 on a CPU that emulates it gets the
// measured slowdown against fp32.  comm may be NULL (one process); with ranks, rank 0 decides.
void precision_resolve(Config *cfg, Comm *comm, const char *resume_from);

#endif

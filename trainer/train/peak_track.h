// What a training run counts MFU against (DESIGN.md §9, issues 49/50): the nominal peak of the
// cores at the run's precision (peak_nominal.h; a GPU's data-sheet peak), with the measured
// matmul ceiling reported beside it.  The ceiling is re-measured at evaluations, the best kept,
// so a start-up probe that shared the cores with other jobs does not stay the figure; at most 1%
// of the run goes to it (an evaluation measures only once 100 times the last measurement's time
// has passed).
#ifndef MHE_TRAINER_PEAK_TRACK_H
#define MHE_TRAINER_PEAK_TRACK_H

#include "comm/comm.h"
#include "kernels/ops.h"

typedef struct {
    double nominal;     // GFLOP/s, all ranks together; <= 0 unknown (MFU then n/a)
    double ceiling;     // the best measured matmul rate so far, all ranks together; <= 0 none (GPU)
    int cpu;            // 1: the CPU backend (its ceiling is measured)
    int size;           // the square product size that gave the ceiling at start
    double measured_at; // omp_get_wtime() of the last measurement's end
    double measure_s;   // how long the last measurement at `size` took
    char desc[192];     // how the nominal figure was made (rank 0's)
} PeakTrack;

// gpu_peak_gflops: the GPU's data-sheet peak (ignored on the CPU).  Collective over comm.
void peak_track_start(PeakTrack *p, Backend *be, Comm *comm, double gpu_peak_gflops);
// The CPU's ceiling measured again at the size that gave it at start, the best kept, when due
// (above; collective; nothing on a GPU).
void peak_track_remeasure(PeakTrack *p, Backend *be, Comm *comm);
// For the run's header: on the CPU "MFU against the nominal peak N GFLOP/s (how), measured matmul
// ceiling C GFLOP/s"; on a GPU "matmul ceiling N GFLOP/s (the GPU's data sheet, ...)".  Returns buf.
const char *peak_track_describe(const PeakTrack *p, char *buf, size_t len);
// MFU of a step at `achieved` GFLOP/s against the nominal peak, never above 1: a step that outran
// the nominal figure (a clock above the one the CPU reports) raises it, saying so once (peak_mfu).
// -1 when unknown.
double peak_track_mfu(PeakTrack *p, double achieved);

#endif

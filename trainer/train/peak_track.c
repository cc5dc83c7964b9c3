#include "trainer/train/peak_track.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "trainer/train/peak.h"
#include "trainer/train/peak_nominal.h"

void peak_track_start(PeakTrack *p, Backend *be, Comm *comm, double gpu_peak_gflops) {
    memset(p, 0, sizeof *p);
    p->cpu = strcmp(be->name, "cpu") == 0;
    double v[2] = {gpu_peak_gflops, 0};
    if (p->cpu) {
        char lib[128];
        backend_cpu_library(lib, sizeof lib);
        v[0] = peak_nominal_cpu(omp_get_max_threads(), lib, be->act == DT_BF16, p->desc, sizeof p->desc);
        v[1] = peak_matmul_ceiling(be, &p->size, &p->measure_s);
        p->measured_at = omp_get_wtime();
    } else {
        snprintf(p->desc, sizeof p->desc, "the GPU's data sheet, dense %s", be->act == DT_BF16 ? "bf16" : "fp32");
    }
    comm_allreduce_sum_f64(comm, v, 2);
    p->nominal = v[0];
    p->ceiling = v[1];
    peak_nominal_floor(&p->nominal, p->ceiling, p->desc, sizeof p->desc);
}

void peak_track_remeasure(PeakTrack *p, Backend *be, Comm *comm) {
    if (!p->cpu || p->size <= 0) return;
    // At most 1% of the run: only once the time since the last measurement is 100 times what it
    // took.  The ranks' clocks differ, so they agree first (any rank due: all measure).
    const double now = omp_get_wtime();
    double due = now - p->measured_at >= 100.0 * p->measure_s;
    comm_allreduce_sum_f64(comm, &due, 1);
    if (due == 0) return;
    // Only the size that gave the ceiling at start, not the whole ladder.
    double g = peak_matmul_gflops(be, p->size, 3);
    p->measured_at = omp_get_wtime();
    p->measure_s = p->measured_at - now;
    comm_allreduce_sum_f64(comm, &g, 1);
    if (g > p->ceiling) p->ceiling = g;
    peak_nominal_floor(&p->nominal, p->ceiling, p->desc, sizeof p->desc);
}

const char *peak_track_describe(const PeakTrack *p, char *buf, size_t len) {
    if (p->cpu)
        snprintf(buf, len, "MFU against the nominal peak %.1f GFLOP/s (%s), measured matmul ceiling %.1f GFLOP/s",
                 p->nominal, p->desc, p->ceiling);
    else
        snprintf(buf, len, "matmul ceiling %.1f GFLOP/s (%s)", p->nominal, p->desc);
    return buf;
}

double peak_track_mfu(PeakTrack *p, double achieved) { return peak_mfu(&p->nominal, achieved); }

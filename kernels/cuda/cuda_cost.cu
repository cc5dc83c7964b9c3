// defines: the cost model's recorder (mhe_cost_*), the GPU figures and the bound (roofline) prediction.
// The per-call cost model (kernels/cuda/README.md "Cost model"): the recorder every launch
// reports to (cuda_cost.h) and the prediction
//     time(call) = max(tc_flops / bf16_peak + flops / fp32_peak, bytes / bandwidth)
//                  + host_bytes / pcie + launch overhead
// laid out on a per-stream timeline: calls of a stream back to back, event waits ordering the
// compute stream and the communication stream (NCCL all-reduces, predicted as a ring).  Host
// code only; the same file is compiled by nvcc (real backend) and by g++ (emulation), so both
// record the same calls.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <strings.h>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "kernels/backend_info.h"
}
#include "kernels/cuda/cuda_cost.h"
#include "kernels/cuda/cuda_cost_expect.h"

extern "C" [[noreturn]] void mhe_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

namespace {

enum Kind { CALL, EVENT_RECORD, STREAM_WAIT, ALLREDUCE, SYNC };

struct Record {
    const char *name;
    std::string label;  // gemms: with their shape; kernels: the kernel name
    int op_class;       // -1 until the op that issued it closes
    MheCost cost;
    int kind = CALL;
    int stream = MHE_STREAM_COMPUTE;
    const void *event = nullptr;  // EVENT_RECORD, STREAM_WAIT
    int world = 1;                // ALLREDUCE: the communicator's size; cost.bytes: the buffer
    double passes = 2.0;          // ALLREDUCE: ring passes over the buffer (2 all-reduce, 1 reduce
                                  // or broadcast)
    int M = 0, N = 0, K = 0, batch = 0, bf16 = 0;  // gemms: the shape (expected time by waves)
    bool lds_aligned = false;  // gemms: every leading dimension a 16-byte multiple, whatever M, N, K
};

struct Span {
    int stream;
    double start, end;
    std::string label;
};

struct Recorder {
    bool recording = false, dry = false;
    std::vector<Record> recs;
    size_t open_from = 0;  // first record not yet given an op class
    long blas_pending = 0;
    bool lds_aligned_next = false;  // mhe_cost_gemm_lds_aligned: for the next gemm recorded
    std::unordered_map<const void *, size_t> live;
    double current = 0, peak = 0;
    int ranks = 0;            // backend_cuda_cost_ranks: 0 = the communicator's size
    std::vector<Span> spans;  // the last predicted step
};

Recorder &rec() {
    static Recorder r;
    return r;
}

// Published dense figures (SXM parts): bf16 tensor cores without sparsity, fp32 on CUDA
// cores (no TF32), HBM bandwidth, PCIe gen4/gen5 x16 one direction, and a kernel launch.
// All-reduce: NVLink 3 (A100, 600 GB/s per GPU both directions) and NVLink 4 (H100, 900 GB/s)
// reach about 230 and 360 GB/s of NCCL ring bus bandwidth between the 8 GPUs of a node (about
// 77-80% of one direction); ~10 us per call (README "Streams and the all-reduce").
// The H200 SXM is the H100's chip with HBM3e: the same arithmetic, 4.8 TB/s by its data sheet.
const GpuSpec specs[] = {
    {"a100", 312e12, 19.5e12, 2.039e12, 25e9, 4e-6, 230e9, 10e-6, 108},
    {"h100", 989e12, 67e12, 3.35e12, 50e9, 4e-6, 360e9, 10e-6, 132},
    {"h200", 989e12, 67e12, 4.8e12, 50e9, 4e-6, 360e9, 10e-6, 132},
};

}  // namespace

bool mhe_cost_record(const char *name, MheCost c) {
    Recorder &r = rec();
    if (r.recording) r.recs.push_back(Record{name, name, -1, c});
    return !r.dry;
}

// An event record or a stream's wait on one: no work, only ordering for the timeline.
static void record_ordering(int kind, const char *name, int stream, const void *event) {
    Recorder &r = rec();
    if (!r.recording) return;
    Record x{name, name, -1, MheCost{0, 0, 0, 0, 0}};
    x.kind = kind;
    x.stream = stream;
    x.event = event;
    r.recs.push_back(x);
}

void mhe_cost_record_sync(const char *why) { record_ordering(SYNC, why, MHE_STREAM_COMPUTE, nullptr); }

void mhe_cost_event_record(const void *event, int stream) { record_ordering(EVENT_RECORD, "event", stream, event); }

void mhe_cost_stream_wait(int stream, const void *event) { record_ordering(STREAM_WAIT, "wait", stream, event); }

bool mhe_cost_record_collective(const char *label, double passes, double bytes, int world, int stream) {
    Recorder &r = rec();
    if (r.recording) {
        Record x{"nccl", label, -1, MheCost{0, 0, bytes, 0, 0}};
        x.kind = ALLREDUCE;
        x.stream = stream;
        x.world = world;
        x.passes = passes;
        r.recs.push_back(x);
    }
    return !r.dry;
}

bool mhe_cost_record_allreduce(double bytes, int world, int stream) {
    return mhe_cost_record_collective("nccl all-reduce", 2.0, bytes, world, stream);
}

static bool record_gemm(int M, int N, int K, int batch, int bf16, int reads_c, const char *epilogue,
                        double epilogue_bytes, double c_el = 4.0) {
    Recorder &r = rec();
    r.blas_pending++;
    const bool lds_aligned = r.lds_aligned_next;
    r.lds_aligned_next = false;
    if (r.recording) {
        double mnk = 2.0 * M * N * K * batch, el = bf16 ? 2.0 : 4.0;
        MheCost c{0, 0, 0, 0, 0};
        (bf16 ? c.tc_flops : c.flops) = mnk;
        c.bytes = batch * (el * ((double)M * K + (double)K * N) + c_el * M * N * (reads_c ? 2 : 1)) + epilogue_bytes;
        char label[96];
        std::snprintf(label, sizeof label, "gemm %dx%dx%d%s%s %s%s%s%s", M, N, K, batch > 1 ? " x" : "",
                      batch > 1 ? std::to_string(batch).c_str() : "", bf16 ? "bf16" : "fp32",
                      c_el < 4.0 ? "->bf16" : "", epilogue ? " " : "", epilogue ? epilogue : "");
        Record x{"gemm", label, -1, c};
        x.M = M, x.N = N, x.K = K, x.batch = batch, x.bf16 = bf16, x.lds_aligned = lds_aligned;
        r.recs.push_back(x);
    }
    return !r.dry;
}

void mhe_cost_gemm_lds_aligned(void) { rec().lds_aligned_next = true; }

bool mhe_cost_record_gemm(int M, int N, int K, int batch, int bf16, int reads_c) {
    return record_gemm(M, N, K, batch, bf16, reads_c, nullptr, 0.0);
}

bool mhe_cost_record_gemm_epilogue(int M, int N, int K, int bf16, int reads_c, const char *epilogue,
                                   double epilogue_bytes) {
    return record_gemm(M, N, K, 1, bf16, reads_c, epilogue, epilogue_bytes);
}

bool mhe_cost_record_gemm_bf16_out(int M, int N, int K, const char *epilogue, double epilogue_bytes) {
    return record_gemm(M, N, K, 1, 1, 0, epilogue, epilogue_bytes, 2.0);
}

bool mhe_cost_record_gemm_bf16_acc(int M, int N, int K) {
    return record_gemm(M, N, K, 1, 1, 1, nullptr, 0.0, 2.0);
}

bool mhe_cost_record_gemm_bf16_batched(int M, int N, int K, int batch, int c_bf16) {
    return record_gemm(M, N, K, batch, 1, 0, nullptr, 0.0, c_bf16 ? 2.0 : 4.0);
}

bool mhe_cost_take_blas(void) {
    Recorder &r = rec();
    if (r.blas_pending <= 0)
        mhe_fatal("cost model: a cuBLAS call was issued without mhe_cost_record_gemm before it");
    r.blas_pending--;
    return !r.dry;
}

void mhe_cost_close_op(int op_class) {
    Recorder &r = rec();
    for (size_t i = r.open_from; i < r.recs.size(); i++)
        if (r.recs[i].op_class < 0) r.recs[i].op_class = op_class;
    r.open_from = r.recs.size();
}

void mhe_cost_alloc(const void *p, size_t bytes) {
    Recorder &r = rec();
    r.live[p] = bytes;
    r.current += (double)bytes;
    r.peak = std::max(r.peak, r.current);
}

void mhe_cost_restart_peak(void) {
    Recorder &r = rec();
    r.peak = r.current;
}

void mhe_cost_free(const void *p) {
    Recorder &r = rec();
    auto it = r.live.find(p);
    if (it == r.live.end()) return;
    r.current -= (double)it->second;
    r.live.erase(it);
}

bool mhe_cost_dry_run(void) { return rec().dry; }

extern "C" const GpuSpec *gpu_spec_find(const char *name) {
    for (const GpuSpec &s : specs)
        if (name && strcasecmp(name, s.name) == 0) return &s;
    return nullptr;
}

extern "C" int backend_cuda_cost_dry_run(int on) {
#if defined(MHE_CUDA_EMU)
    rec().dry = on != 0;
    return 1;
#else
    (void)on;
    return 0;  // a real GPU executes what it is given
#endif
}

extern "C" void backend_cuda_cost_start(void) {
    Recorder &r = rec();
    r.recs.clear();
    r.open_from = 0;
    r.recording = true;
}

extern "C" double backend_cuda_cost_predict(const GpuSpec *g, double tc_flops, double flops,
                                            double bytes, double host_bytes) {
    double compute = tc_flops / g->bf16_flops + flops / g->fp32_flops;
    return std::max(compute, bytes / g->bytes_per_s) + host_bytes / g->pcie_bytes_per_s + g->launch_s;
}

// One recorded call: a kernel whose real grid (MheCost.blocks) is smaller than the SM count
// leaves the other SMs idle, so its work runs at blocks/SMs of the GPU's rates (one thread per
// column over 768 columns is 3 blocks of 256 threads).
static double call_seconds(const GpuSpec *g, const Record &x) {
    const MheCost &c = x.cost;
    const double t = backend_cuda_cost_predict(g, c.tc_flops, c.flops, c.bytes, c.host_bytes);
    if (c.blocks <= 0 || c.blocks >= g->sms) return t;
    const double fixed = c.host_bytes / g->pcie_bytes_per_s + g->launch_s;
    return (t - fixed) * g->sms / c.blocks + fixed;
}

// The same call at the efficiency table's rates (cuda_cost_expect.cu), never below its bound: the
// table's launch terms (1 us gap, 2 us shortest kernel) undercut the bound's 4 us launch on a
// kernel of a few microseconds, and an expectation faster than the bound would be no bound's.
static double call_expected_seconds(const GpuSpec *g, const Record &x) {
    const double e = x.batch > 0 ? cost_expected_gemm(g, x.M, x.N, x.K, x.batch, x.bf16, x.cost.bytes, true, x.lds_aligned)
                                 : cost_expected_kernel(g, x.label.c_str(), x.cost);
    return std::max(e, call_seconds(g, x));
}

extern "C" void backend_cuda_cost_ranks(int ranks) { rec().ranks = ranks > 0 ? ranks : 0; }

// Ring all-reduce: every rank sends and receives 2 (n-1)/n of the buffer (reduce-scatter then
// all-gather), at the bus bandwidth, plus a fixed cost per call; nothing on one rank.  A ring
// reduce or broadcast is one such pass (`passes` = 1).
static double allreduce_seconds(const GpuSpec *g, double bytes, int n, double passes = 2.0) {
    if (n <= 1) return 0;
    return passes * (n - 1) / n * bytes / g->allreduce_bus_bytes_per_s + g->allreduce_latency_s;
}

// The step's time the compute stream is idle for communication; rounding's residue of the
// subtraction (sums of the same times in another order) is none.
static double exposed(double step, double compute, double sync_idle) {
    const double x = step - compute - sync_idle;
    return x > 1e-9 * step ? x : 0.0;
}

// Lays the records out on the streams in issue order: a call starts when its stream has
// finished the previous one and every event the stream waited on has been reached.
// `expected`: each call at call_expected_seconds instead of the bound; the result goes to the
// report's expected_* fields and the timeline file keeps the bound's.
static void schedule(const GpuSpec *g, Recorder &r, CostReport *out, bool expected) {
    double clock[MHE_STREAMS] = {0}, busy[MHE_STREAMS] = {0}, sync_idle = 0;
    std::unordered_map<const void *, double> at;  // event -> time it is reached
    if (!expected) r.spans.clear();
    for (const Record &x : r.recs) {
        double &now = clock[x.stream];
        if (x.kind == EVENT_RECORD) {
            at[x.event] = now;
            continue;
        }
        if (x.kind == SYNC) {
            // Drained: the next call on any stream is issued by the host after it wakes.
            double drained = *std::max_element(clock, clock + MHE_STREAMS);
            const double idle = expected ? cost_expected_sync(g) : g->launch_s;
            sync_idle += idle;
            drained += idle;
            for (double &c : clock) c = drained;
            if (!expected) out->syncs++;
            continue;
        }
        if (x.kind == STREAM_WAIT) {
            // An event recorded before the recording began was reached before it: time 0.
            auto it = at.find(x.event);
            if (it != at.end() && it->second > now) now = it->second;
            continue;
        }
        double t;
        if (x.kind == ALLREDUCE) {
            int n = r.ranks > 0 ? r.ranks : x.world;
            t = allreduce_seconds(g, x.cost.bytes, n, x.passes);
            if (!expected) {
                out->ranks = n;
                if (out->n_comm < COST_COMM_MAX) out->comm[out->n_comm++] = CostSpan{now, now + t, x.cost.bytes};
                out->comm_calls++;
                out->comm_bytes += x.cost.bytes;
            }
        } else {
            t = expected ? call_expected_seconds(g, x) : call_seconds(g, x);
        }
        if (!expected) r.spans.push_back(Span{x.stream, now, now + t, x.label});
        now += t;
        busy[x.stream] += t;
    }
    if (expected) {
        out->expected_seconds = *std::max_element(clock, clock + MHE_STREAMS);
        out->expected_compute_seconds = busy[MHE_STREAM_COMPUTE];
        out->expected_exposed_comm_seconds =
            exposed(out->expected_seconds, busy[MHE_STREAM_COMPUTE], sync_idle);
        return;
    }
    out->seconds = *std::max_element(clock, clock + MHE_STREAMS);
    out->compute_seconds = busy[MHE_STREAM_COMPUTE];
    out->comm_seconds = busy[MHE_STREAM_COMM];
    out->serial_seconds = out->compute_seconds + out->comm_seconds;
    // The compute stream is idle while it waits for a sum, after its last call while a sum still
    // runs (communication the step pays for), or after a host synchronisation (counted apart).
    out->exposed_comm_seconds = exposed(out->seconds, out->compute_seconds, sync_idle);
    out->sync_seconds = sync_idle;
}

extern "C" int backend_cuda_cost_write_timeline(const char *path) {
    FILE *f = std::fopen(path, "w");
    if (!f) return -1;
    std::fprintf(f, "stream\tstart_us\tend_us\tcall\n");
    for (const Span &s : rec().spans)
        std::fprintf(f, "%s\t%.3f\t%.3f\t%s\n", s.stream == MHE_STREAM_COMM ? "comm" : "compute", 1e6 * s.start,
                     1e6 * s.end, s.label.c_str());
    return std::fclose(f) == 0 ? 0 : -1;
}

extern "C" void backend_cuda_cost_stop(const GpuSpec *g, CostReport *out) {
    Recorder &r = rec();
    r.recording = false;
    mhe_cost_close_op(OPC_OTHER);  // calls outside any op (uploads, downloads)
    std::memset(out, 0, sizeof *out);
    out->ranks = r.ranks > 0 ? r.ranks : 1;
    schedule(g, r, out, false);
    schedule(g, r, out, true);
    std::map<std::string, CostEntry> by_label;
    for (const Record &x : r.recs) {
        // Stream ordering is no work; communication is reported on its own (schedule).
        if (x.kind != CALL) {
            if (x.kind == ALLREDUCE) out->launches++;
            continue;
        }
        const MheCost &c = x.cost;
        double t = call_seconds(g, x), te = call_expected_seconds(g, x);
        out->class_seconds[x.op_class] += t;
        out->expected_class_seconds[x.op_class] += te;
        out->class_calls[x.op_class]++;
        out->class_bytes[x.op_class] += c.bytes + c.host_bytes;
        out->launches++;
        out->tc_flops += c.tc_flops;
        out->flops += c.flops;
        out->bytes += c.bytes + c.host_bytes;
        if (std::strcmp(x.name, "gemm") == 0) out->gemm_flops += c.tc_flops + c.flops;
        CostEntry &e = by_label[x.label + "|" + std::to_string(x.op_class)];
        if (!e.calls) {
            std::snprintf(e.label, sizeof e.label, "%s", x.label.c_str());
            e.op_class = x.op_class;
        }
        e.calls++;
        e.seconds += t;
        e.expected_seconds += te;
        e.tc_flops += c.tc_flops;
        e.flops += c.flops;
        e.bytes += c.bytes;
        e.launch_seconds += g->launch_s;
        e.compute_seconds += c.tc_flops / g->bf16_flops + c.flops / g->fp32_flops;
        e.memory_seconds += c.bytes / g->bytes_per_s + c.host_bytes / g->pcie_bytes_per_s;
    }
    std::vector<CostEntry> all;
    for (auto &kv : by_label) all.push_back(kv.second);
    std::sort(all.begin(), all.end(),
              [](const CostEntry &a, const CostEntry &b) { return a.seconds > b.seconds; });
    out->n_top = (int)std::min(all.size(), (size_t)COST_TOP);
    for (int i = 0; i < out->n_top; i++) out->top[i] = all[i];
    out->peak_bytes = r.peak;
    r.recs.clear();
    r.open_from = 0;
}

extern "C" double backend_cuda_cost_peak_bytes(void) { return rec().peak; }

// Built only when the CUDA backend is not: the answers of a CPU-only binary.
#include "kernels/backend_info.h"

#include <string.h>

#include "common/error.h"

int backend_cuda_compiled(void) { return 0; }
int backend_cuda_device_count(void) { return 0; }
void backend_cuda_print_versions(FILE *out) {
    fprintf(out, "cuda: not compiled in\ncublas: not compiled in\nnccl: not compiled in\ncudnn: not compiled in\n");
}

int backend_attention_core_select(Backend *be, const char *name, int verbose, char *err, size_t err_len) {
    (void)verbose;
    if (!name || !*name || strcmp(name, "auto") == 0) return 1;
    snprintf(err, err_len, "runtime.attention_core: `%s` is a CUDA core; the %s backend has one (auto)", name,
             be->name);
    return 0;
}

int backend_attention_cores(const char **names, const char **whats, const char **status, int max) {
    (void)names;
    (void)whats;
    (void)status;
    (void)max;
    return 0;
}

Backend *backend_cuda_create_for(int device, int bf16) {
    (void)device;
    (void)bf16;
    mhe_fail("runtime.device: cuda, but this mhetrain was built without the CUDA backend "
             "(rebuild with -DMHE_CUDA=ON where nvcc is installed)");
}

// Unreachable without a CUDA backend (no device buffers exist); kept so the trainer links.
DeviceComm *device_comm_create(void *mpi_comm, Backend *be, float timeout_s) {
    (void)mpi_comm;
    (void)be;
    (void)timeout_s;
    mhe_fatal("internal error: a device communicator needs the CUDA backend");
}
void device_comm_allreduce_sum(DeviceComm *c, float *buf, size_t n) {
    (void)c;
    (void)buf;
    (void)n;
}
void device_comm_allreduce_start(DeviceComm *c, float *buf, size_t n) {
    (void)c;
    (void)buf;
    (void)n;
}
void device_comm_allreduce_finish(DeviceComm *c) { (void)c; }
void device_comm_reduce_start(DeviceComm *c, float *buf, size_t n, int root) {
    (void)c;
    (void)buf;
    (void)n;
    (void)root;
}
void device_comm_broadcast_start(DeviceComm *c, float *buf, size_t n, int root) {
    (void)c;
    (void)buf;
    (void)n;
    (void)root;
}
void device_comm_free(DeviceComm *c) { (void)c; }

// The cost model lives in the CUDA backend; bench --gpu stops at gpu_spec_find == NULL.
const GpuSpec *gpu_spec_find(const char *name) {
    (void)name;
    return NULL;
}
int backend_cuda_cost_dry_run(int on) {
    (void)on;
    return 0;
}
void backend_cuda_cost_start(void) {}
void backend_cuda_cost_stop(const GpuSpec *g, CostReport *r) {
    (void)g;
    (void)r;
}
double backend_cuda_cost_predict(const GpuSpec *g, double tc_flops, double flops, double bytes,
                                 double host_bytes) {
    (void)g;
    (void)tc_flops;
    (void)flops;
    (void)bytes;
    (void)host_bytes;
    return 0;
}
double backend_cuda_cost_peak_bytes(void) { return 0; }
void backend_cuda_cost_ranks(int ranks) { (void)ranks; }
int backend_cuda_cost_write_timeline(const char *path) {
    (void)path;
    return -1;
}
double backend_cuda_cost_expected_gemm(const GpuSpec *g, int M, int N, int K, int batch, int bf16, int ours) {
    (void)g, (void)M, (void)N, (void)K, (void)batch, (void)bf16, (void)ours;
    return 0;
}
double backend_cuda_cost_expected_kernel(const GpuSpec *g, const char *label, double tc_flops, double flops,
                                         double bytes, double blocks) {
    (void)g, (void)label, (void)tc_flops, (void)flops, (void)bytes, (void)blocks;
    return 0;
}
double backend_cuda_peak_flops(int device, int bf16, const char **card) {
    (void)device, (void)bf16;
    if (card) *card = NULL;
    return 0;
}

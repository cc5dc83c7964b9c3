// Built only when the CUDA backend is not: the answers of a CPU-only binary.
#include "kernels/backend_info.h"

#include "common/error.h"

int backend_cuda_compiled(void) { return 0; }
int backend_cuda_device_count(void) { return 0; }
void backend_cuda_print_versions(FILE *out) {
    fprintf(out, "cuda: not compiled in\ncublas: not compiled in\nnccl: not compiled in\n");
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
void device_comm_free(DeviceComm *c) { (void)c; }

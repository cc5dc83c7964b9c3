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

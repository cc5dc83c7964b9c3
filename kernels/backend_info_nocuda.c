// Built only when the CUDA backend is not: the answers of a CPU-only binary.
#include "kernels/backend_info.h"

int backend_cuda_compiled(void) { return 0; }
int backend_cuda_device_count(void) { return 0; }
void backend_cuda_print_versions(FILE *out) {
    fprintf(out, "cuda: not compiled in\ncublas: not compiled in\nnccl: not compiled in\n");
}

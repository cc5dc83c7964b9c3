// defines: kernels/backend_info.h for the CUDA build: versions, device count, backend_cuda_create_for.
// What the CUDA build reports about itself (kernels/backend_info.h): runtime, driver, cuBLAS and
// NCCL versions, and the device count (0 on a machine without a GPU or driver).
#include "kernels/cuda/cuda_attn_core.h"
#include "kernels/cuda/cuda_attn_cudnn.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_nccl.h"

#include <cstdio>
#include <cstring>
#include <cstdlib>

extern "C" {
#include "common/num.h"
#include "kernels/backend_info.h"
#include "kernels/gpu_peak.h"
}

extern "C" int backend_cuda_compiled(void) { return 1; }

// A configuration asking for a GPU the machine does not have is a user error (status 2).
extern "C" Backend *backend_cuda_create_for(int device, int bf16) {
    int n = backend_cuda_device_count();
    if (n == 0)
        mhe_fail("runtime.device: cuda, but no CUDA device is visible (driver or GPU missing; "
                 "use runtime.device: cpu)");
    if (device >= n)
        mhe_fail("runtime.device: cuda, local rank %d needs GPU %d but this host has %d; start "
                 "at most %d ranks per host", device, device, n, n);
#if !defined(MHE_CUDA_EMU)
    char why[512];
    if (!mhe_cuda_libs_load(why, sizeof why))
        mhe_fail("runtime.device: cuda, but the CUDA libraries cannot be loaded: %s (add the toolkit's lib64, or "
                 "PyTorch's nvidia/*/lib folders, to LD_LIBRARY_PATH)", why);
#endif
    return backend_cuda_create(device, bf16);
}

extern "C" double backend_cuda_peak_flops(int device, int bf16, const char **card) {
    if (card) *card = nullptr;
    const char *env = std::getenv("MHE_GPU_PEAK_TFLOPS");
    if (env && *env) {
        double t = 0;
        if (mhe_parse_real(env, 1e-3, 1e6, &t) != MHE_NUM_OK)
            mhe_fail("MHE_GPU_PEAK_TFLOPS=%s: expected the GPU's dense peak in TFLOP/s, a number in (0, 1e6]", env);
        if (card) *card = "MHE_GPU_PEAK_TFLOPS";
        return t * 1e12;
    }
    if (device >= backend_cuda_device_count()) return 0;
#if defined(MHE_CUDA_EMU)
    (void)bf16;
    return 0;  // the emulated device has no data sheet
#else
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return 0;
    const GpuPeak *r = gpu_peak_find(p.name);
    if (!r) return 0;
    if (card) *card = r->card;
    return 1e12 * (bf16 ? r->bf16_tflops : r->fp32_tflops);
#endif
}

extern "C" int backend_cuda_device_count(void) {
    int n = 0;
    // No driver or no device is the normal case on CPU machines: report 0, never fail.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky error for later callers
        return 0;
    }
    return n;
}

extern "C" void backend_cuda_print_versions(FILE *out) {
    int rt = 0, drv = 0, nccl = 0;
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaDriverGetVersion(&drv);
#if !defined(MHE_CUDA_EMU)
    char libs_why[512];
    const int libs = mhe_cuda_libs_load(libs_why, sizeof libs_why);
#else
    const int libs = 1;
#endif
    if (libs) (void)ncclGetVersion(&nccl);
    fprintf(out, "cuda: runtime %d.%d, driver %s", rt / 1000, (rt % 1000) / 10,
            drv ? "" : "none");
    if (drv) fprintf(out, "%d.%d", drv / 1000, (drv % 1000) / 10);
    fprintf(out, ", devices %d%s\n", backend_cuda_device_count(),
#if defined(MHE_CUDA_EMU)
            " (emulated)"
#else
            ""
#endif
    );
    fprintf(out, "cublas: %d.%d.%d (compiled against)\n", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
            CUBLAS_VER_PATCH);
#if !defined(MHE_CUDA_EMU)
    if (!libs) fprintf(out, "cublas, cublasLt, nccl: not loaded (%s); runtime.device: cuda cannot run here\n", libs_why);
    else
#endif
        fprintf(out, "nccl: %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
#if defined(MHE_HAVE_CUDNN) && !defined(MHE_CUDA_EMU)
    char why[512];
    const long fe = mhe_cudnn_frontend_version();
    if (mhe_cudnn_load(why, sizeof why)) {
        const long v = mhe_cudnn_version();
        fprintf(out, "cudnn: %ld.%ld.%ld (loaded at run time), frontend %ld.%ld.%ld\n", v / 10000, (v / 100) % 100,
                v % 100, fe / 10000, (fe / 100) % 100, fe % 100);
    } else {
        fprintf(out, "cudnn: not loaded (%s), frontend %ld.%ld.%ld\n", why, fe / 10000, (fe / 100) % 100, fe % 100);
    }
#elif defined(MHE_CUDA_EMU)
    fprintf(out, "cudnn: none under the emulation\n");
#else
    fprintf(out, "cudnn: not built (no cuDNN frontend headers at build time)\n");
#endif
}

// runtime.attention_core (kernels/backend_info.h).
extern "C" int backend_attention_core_select(Backend *be, const char *name, int verbose, char *err, size_t err_len) {
    const bool any = !name || !*name || std::strcmp(name, "auto") == 0;
    if (std::strcmp(be->name, "cuda") != 0) {
        if (any) return 1;
        std::snprintf(err, err_len, "runtime.attention_core: `%s` is a CUDA core; the %s backend has one (auto)", name,
                      be->name);
        return 0;
    }
    return cuda_attention_core_select(be, name, verbose, err, err_len);
}

extern "C" int backend_attention_cores(const char **names, const char **whats, const char **status, int max) {
    int n = 0;
    const AttnCore *const *cores = attn_cores(&n);
    for (int i = 0; i < n && i < max; i++) {
        names[i] = cores[i]->name;
        whats[i] = cores[i]->what;
        const char *r = cores[i]->unavailable(nullptr);
        status[i] = r ? r : "available";
    }
    return n;
}

// The trainer's view of the NCCL communicator (kernels/backend_info.h).
struct DeviceComm {
    CudaNccl *nccl;
};

extern "C" DeviceComm *device_comm_create(void *mpi_comm, Backend *be, float timeout_s) {
    DeviceComm *c = new DeviceComm;
    c->nccl = cuda_nccl_create(mpi_comm, be, timeout_s);
    return c;
}

extern "C" void device_comm_allreduce_sum(DeviceComm *c, float *buf, size_t n) {
    cuda_nccl_allreduce_sum(c->nccl, buf, n);
}

extern "C" void device_comm_allreduce_start(DeviceComm *c, float *buf, size_t n) {
    cuda_nccl_allreduce_start(c->nccl, buf, n);
}

extern "C" void device_comm_allreduce_finish(DeviceComm *c) { cuda_nccl_allreduce_finish(c->nccl); }

extern "C" void device_comm_reduce_start(DeviceComm *c, float *buf, size_t n, int root) {
    cuda_nccl_reduce_start(c->nccl, buf, n, root);
}

extern "C" void device_comm_broadcast_start(DeviceComm *c, float *buf, size_t n, int root) {
    cuda_nccl_broadcast_start(c->nccl, buf, n, root);
}

extern "C" void device_comm_free(DeviceComm *c) {
    if (!c) return;
    cuda_nccl_free(c->nccl);
    delete c;
}

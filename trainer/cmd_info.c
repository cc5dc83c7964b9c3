// mhetrain info: what this binary was built with and what it links at run time.
#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <yaml.h>
#include <cjson/cJSON.h>

#include "kernels/backend_info.h"
#include "trainer/commands.h"

int cmd_info(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain info\n\nPrints the version, the backends compiled in, and the MPI, NCCL, cuBLAS,\n"
               "BLAS, OpenMP, libyaml and cJSON versions in use.\n");
        return 0;
    }
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi_version, &len);
    for (int i = 0; i < len; i++)
        if (mpi_version[i] == '\n' || mpi_version[i] == ',') { mpi_version[i] = '\0'; break; }
    printf("mhetrain %s\n", MHE_VERSION);
    printf("backends: cpu%s\n", backend_cuda_compiled() ? " cuda" : "");
    printf("cuda devices: %d\n", backend_cuda_device_count());
    printf("mpi: %s\n", mpi_version);
    backend_cuda_print_versions(stdout);
    printf("blas: %s (%d threads)\n", openblas_get_config(), openblas_get_num_threads());
    printf("openmp: %d (max threads %d)\n", _OPENMP, omp_get_max_threads());
    printf("libyaml: %s\n", yaml_get_version_string());
    printf("cjson: %s\n", cJSON_Version());
    return 0;
}

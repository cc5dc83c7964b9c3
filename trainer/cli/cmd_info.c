// mhetrain info: what this binary was built with and what it links at run time.
#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include <cjson/cJSON.h>

#include "comm/comm.h"
#include "kernels/backend_info.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"

// Under mpirun: which rank runs on which host and device (one line per rank, from rank 0).
static void print_rank_map(Comm *comm) {
    enum { ENTRY = 128 };
    char mine[ENTRY] = {0};
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    int ndev = backend_cuda_device_count();
    int local = comm_local_rank(comm);
    if (ndev > 0)
        snprintf(mine, sizeof mine, "rank %d -> host %s (local rank %d) -> cuda:%d", comm_rank(comm), host, local, local % ndev);
    else
        snprintf(mine, sizeof mine, "rank %d -> host %s (local rank %d) -> cpu", comm_rank(comm), host, local);
    int world = comm_world(comm);
    char *all = malloc((size_t)world * ENTRY);
    comm_allgather(comm, mine, all, ENTRY);
    if (comm_rank(comm) == 0)
        for (int r = 0; r < world; r++) printf("%s\n", all + (size_t)r * ENTRY);
    free(all);
}

// One line per registered attention type, tab-separated: name; the overrides that make a tiny
// model of it valid (its keys at their test values; "-" when none); its own keys ("-": none);
// the one-line doc.  Scripts and tests enumerate the variants from this (`cut -f1`).
static void print_attention_types(void) {
    for (int t = 0; t < ATTN_TYPE_COUNT; t++) {
        const AttnTypeSpec *s = attention_type_spec((AttentionType)t);
        printf("%s\t", s->name);
        int any = 0;
        for (const AttnTypeKey *k = s->keys; k->key; k++)
            if (k->test_value >= 0) printf("%s%s=%d", any++ ? " " : "", k->key, k->test_value);
        printf("%s\t", any ? "" : "-");
        for (const AttnTypeKey *k = s->keys; k->key; k++) printf("%s%s", k == s->keys ? "" : " ", k->key);
        printf("%s\t%s\n", s->keys[0].key ? "" : "-", s->doc);
    }
}

int cmd_info(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain info [--config-reference | --attention-types]\n\nPrints the version, the backends compiled in, and the MPI, NCCL, cuBLAS,\n"
               "BLAS, OpenMP, libyaml and cJSON versions in use.\n"
               "  --config-reference  print the config key reference of configs/README.md (markdown)\n"
               "  --attention-types   one line per attention type: name<TAB>test overrides<TAB>its keys<TAB>doc\n");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--config-reference") == 0) {
        config_write_reference(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--attention-types") == 0) {
        print_attention_types();
        return 0;
    }
    // Launched by mpirun: print the rank map once, then the library versions from rank 0 only.
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        Comm *comm = comm_init(&argc, &argv, 60.0f);
        int rank = comm_rank(comm);
        if (rank == 0) printf("world: %d ranks\n", comm_world(comm));
        fflush(stdout);
        print_rank_map(comm);
        fflush(stdout);
        comm_finalize(comm);
        if (rank != 0) return 0;
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
    // runtime.attention_core: the CUDA cores in auto's order, and whether each can run here.
    const char *names[16], *whats[16], *status[16];
    const int ncores = backend_attention_cores(names, whats, status, 16);
    for (int i = 0; i < ncores && i < 16; i++)
        printf("attention core %s: %s [%s]\n", names[i], whats[i], status[i]);
    return 0;
}

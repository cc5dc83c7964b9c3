// EXPECT for the C++ tests of the emulation (test_emu_reduce, test_cuda_streams), which launch
// kernels, fork and run MPI outside cmocka: a failed condition prints its place and message and
// is counted; main returns non-zero when `failures` is.
#ifndef MHE_TESTS_CUDA_EXPECT_H
#define MHE_TESTS_CUDA_EXPECT_H

#include <cstdio>

static int failures = 0;
#define EXPECT(cond, ...)                                             \
    do {                                                              \
        if (!(cond)) {                                                \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            std::fprintf(stderr, __VA_ARGS__);                        \
            std::fprintf(stderr, "\n");                               \
            failures++;                                               \
        }                                                             \
    } while (0)

#endif

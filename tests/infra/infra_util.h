// Shared by the infra tests: a hand-built parameter table covering every ParamKind, scratch
// directories under the build tree, and running the Python oracle.
#ifndef MHE_TESTS_INFRA_UTIL_H
#define MHE_TESTS_INFRA_UTIL_H

#include <stddef.h>

#include "trainer/model/params.h"

// Tensors of every kind with awkward sizes; `scale` multiplies every dimension so the crash
// test can make checkpoints large enough to be killed mid-write.
void infra_table(ParamTable *t, int scale);
// A fresh empty directory $MHE_BINARY_DIR/infra_tmp/<name> (removed first if present).
// Returns a malloc'd path.
char *infra_scratch_dir(const char *name);
// Removes a directory tree (checkpoint trees are at most two levels deep).
void infra_rm_tree(const char *path);
// The venv Python ($MHE_SOURCE_DIR/.venv/bin/python), malloc'd.
char *infra_python(void);

#endif

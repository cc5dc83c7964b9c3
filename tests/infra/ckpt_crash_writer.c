// Helper for test_infra_checkpoint_crash: writes checkpoints in a loop until killed.
//   ckpt_crash_writer OUT_DIR FIRST_STEP COUNT   (COUNT 0: forever)
// Every value is a function of the step, so the test can check whatever checkpoint survives.
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "tests/infra/crash_model.h"
#include "trainer/io/checkpoint.h"

int main(int argc, char **argv) {
    if (argc != 4) mhe_fail("usage: ckpt_crash_writer OUT_DIR FIRST_STEP COUNT");
    const int64_t first = atoll(argv[2]), count = atoll(argv[3]);
    CrashModel cm;
    crash_model_init(&cm);
    for (int64_t s = first; count == 0 || s < first + count; s++) {
        crash_model_fill(&cm, s);
        if (checkpoint_save(argv[1], &cm.state, &cm.t, cm.params, &cm.opt, 2) != 0) return 1;
    }
    crash_model_free(&cm);
    return 0;
}

// What every subcommand shares: --help, the config argument and its key=value overrides, integer
// options with their one-line errors (declared in commands.h).
#include <string.h>

#include "common/error.h"
#include "common/num.h"
#include "trainer/cli/commands.h"

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return 0;
}

void cli_take_config_arg(CliConfigArgs *a, const char *cmd, const char *arg, void (*usage)(FILE *)) {
    if (arg[0] == '-' && arg[1] == '-') {
        usage(stderr);
        mhe_fail("%s: unknown option '%s'", cmd, arg);
    }
    if (!a->path) {
        a->path = arg;
        return;
    }
    if (a->n_overrides == CLI_MAX_OVERRIDES) mhe_fail("%s: too many overrides", cmd);
    a->overrides[a->n_overrides++] = (char *)arg;
}

long long cli_int_option(const char *cmd, const char *opt, const char *v, long long lo, long long hi) {
    long long x;
    if (mhe_parse_int(v, lo, hi, &x) != MHE_NUM_OK)
        mhe_fail("%s: %s expects an integer in [%lld, %lld], got \"%s\"", cmd, opt, lo, hi, v);
    return x;
}

double cli_real_option(const char *cmd, const char *opt, const char *v, double lo, double hi) {
    double x;
    if (mhe_parse_real(v, lo, hi, &x) != MHE_NUM_OK)
        mhe_fail("%s: %s expects a number in [%g, %g], got \"%s\"", cmd, opt, lo, hi, v);
    return x;
}

void cli_require_config(const CliConfigArgs *a, const char *cmd, void (*usage)(FILE *)) {
    if (a->path) return;
    usage(stderr);
    mhe_fail("%s: missing the config file", cmd);
}

const char *cli_resume_from(const char *resume, const char *out_dir) {
    if (strcmp(resume, "none") == 0) return NULL;
    return strcmp(resume, "auto") == 0 ? out_dir : resume;
}

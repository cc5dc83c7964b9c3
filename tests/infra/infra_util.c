#include "tests/infra/infra_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

static void add(ParamTable *t, ParamKind kind, const char *name, int rows, int cols) {
    if (t->count == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->tensors = mhe_realloc(t->tensors, (size_t)t->cap * sizeof *t->tensors);
    }
    ParamTensor *p = &t->tensors[t->count++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    p->offset = t->total;
    p->kind = kind;
    p->layer = -1;
    t->total += p->numel;
}

void infra_table(ParamTable *t, int s) {
    memset(t, 0, sizeof *t);
    add(t, PARAM_EMBEDDING, "embed.tokens.weight", 11 * s, 6);
    add(t, PARAM_NORM, "embed.norm.weight", 6, 0);
    add(t, PARAM_NORM, "embed.norm.bias", 6, 0);
    add(t, PARAM_WEIGHT, "layers.0.attn.q.weight", 7 * s, 6);
    add(t, PARAM_BIAS, "layers.0.attn.q.bias", 7 * s, 0);
    add(t, PARAM_HEAD_EMBED, "layers.0.attn.head_embed", 3, 5);
    add(t, PARAM_WEIGHT, "layers.0.ffn.up.weight", 9 * s, 7);
    add(t, PARAM_WEIGHT, "layers.0.ffn.zero.weight", 4, 3);  // stays 0: LAMB's ||w|| = 0 guard
    add(t, PARAM_BIAS, "layers.0.ffn.up.bias", 9 * s, 0);
}

void infra_rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) infra_rm_tree(sub);
        else unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

char *infra_scratch_dir(const char *name) {
    const char *bin = getenv("MHE_BINARY_DIR");
    if (!bin) bin = ".";
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/infra_tmp", bin);
    mkdir(buf, 0777);
    snprintf(buf, sizeof buf, "%s/infra_tmp/%s", bin, name);
    infra_rm_tree(buf);
    if (mkdir(buf, 0777) != 0) mhe_fatal("cannot create %s", buf);
    return mhe_strdup(buf);
}

char *infra_python(void) {
    const char *src = getenv("MHE_SOURCE_DIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/.venv/bin/python", src ? src : ".");
    return mhe_strdup(buf);
}

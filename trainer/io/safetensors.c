#include "trainer/io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static const char *DTYPE_NAMES[] = {"F32", "I32", "I64", "BF16", "F64", "U8", "F16"};
static const size_t DTYPE_SIZES[] = {4, 4, 8, 2, 8, 1, 2};

size_t st_dtype_size(StDtype t) { return DTYPE_SIZES[t]; }
const char *st_dtype_name(StDtype t) { return DTYPE_NAMES[t]; }

void st_init(StFile *f) { memset(f, 0, sizeof *f); }

void st_add(StFile *f, const char *name, StDtype dtype, int ndim, const int64_t *shape, const void *data) {
    if (f->count == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 32;
        f->tensors = mhe_realloc(f->tensors, (size_t)f->cap * sizeof *f->tensors);
    }
    StTensor *t = &f->tensors[f->count++];
    memset(t, 0, sizeof *t);
    t->name = mhe_strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->data = data;
    t->nbytes = n * DTYPE_SIZES[dtype];
}

int st_write(const StFile *f, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < f->count; i++) {
        const StTensor *t = &f->tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", DTYPE_NAMES[t->dtype]);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t->nbytes)));
        off += t->nbytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t jlen = strlen(json);
    size_t padded = (jlen + 7) & ~(size_t)7;  // data starts 8-byte aligned
    FILE *out = fopen(path, "wb");
    if (!out) {
        free(json);
        return -1;
    }
    uint64_t hlen = padded;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    int ok = fwrite(le, 1, 8, out) == 8 && fwrite(json, 1, jlen, out) == jlen;
    for (size_t i = jlen; ok && i < padded; i++) ok = fputc(' ', out) != EOF;
    for (int i = 0; ok && i < f->count; i++)
        ok = fwrite(f->tensors[i].data, 1, f->tensors[i].nbytes, out) == f->tensors[i].nbytes;
    int err = ok ? 0 : errno;  // the caller's message names the first failure's reason
    free(json);
    if (fclose(out) != 0 && ok) ok = 0, err = errno;
    errno = err;
    return ok ? 0 : -1;
}

static int parse_dtype(const char *s) {
    for (int i = 0; i < (int)(sizeof DTYPE_NAMES / sizeof *DTYPE_NAMES); i++)
        if (strcmp(s, DTYPE_NAMES[i]) == 0) return i;
    return -1;
}

void st_read(StFile *f, const char *path) {
    st_init(f);
    size_t len;
    char *blob = mhe_read_file(path, &len);
    if (len < 8) mhe_fail_byte(path, (long long)len, "truncated safetensors file: expected an 8-byte header length");
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)(unsigned char)blob[i] << (8 * i);
    if (hlen > len - 8) mhe_fail_byte(path, 0, "header length %llu exceeds the file size %zu", (unsigned long long)hlen, len);
    char *hdr = mhe_malloc(hlen + 1);
    memcpy(hdr, blob + 8, hlen);
    hdr[hlen] = '\0';
    cJSON *root = cJSON_Parse(hdr);
    if (!root || !cJSON_IsObject(root)) {
        long long pos = 8;
        const char *err = cJSON_GetErrorPtr();
        if (err && err >= hdr && err <= hdr + hlen) pos += err - hdr;
        mhe_fail_byte(path, pos, "malformed safetensors JSON header");
    }
    const size_t data_start = 8 + hlen, data_len = len - data_start;
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
            mhe_fail_byte(path, 8, "tensor '%s': expected dtype, shape and data_offsets", e->string);
        int dtype = parse_dtype(dt->valuestring);
        if (dtype < 0) mhe_fail_byte(path, 8, "tensor '%s': unsupported dtype %s", e->string, dt->valuestring);
        int ndim = cJSON_GetArraySize(shape);
        if (ndim > ST_MAX_DIMS) mhe_fail_byte(path, 8, "tensor '%s': more than %d dimensions", e->string, ST_MAX_DIMS);
        int64_t dims[ST_MAX_DIMS];
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            double v = cJSON_GetArrayItem(shape, d)->valuedouble;
            if (v < 0) mhe_fail_byte(path, 8, "tensor '%s': negative dimension", e->string);
            dims[d] = (int64_t)v;
            numel *= (size_t)dims[d];
        }
        double b = cJSON_GetArrayItem(offs, 0)->valuedouble, en = cJSON_GetArrayItem(offs, 1)->valuedouble;
        if (b < 0 || en < b || (size_t)en > data_len || (size_t)(en - b) != numel * DTYPE_SIZES[dtype])
            mhe_fail_byte(path, (long long)(data_start + (b > 0 ? b : 0)),
                          "tensor '%s': data_offsets [%.0f, %.0f] do not match its shape or the file size %zu",
                          e->string, b, en, len);
        st_add(f, e->string, (StDtype)dtype, ndim, dims, blob + data_start + (size_t)b);
    }
    cJSON_Delete(root);
    free(hdr);
    f->blob = blob;
    f->blob_len = len;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

void st_free(StFile *f) {
    for (int i = 0; i < f->count; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->blob);
    memset(f, 0, sizeof *f);
}

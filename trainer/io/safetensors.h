// safetensors files: u64 header length, JSON header, 8-byte padding, contiguous data.
// Used for checkpoints, export and the tensors exchanged with the PyTorch oracle.
#ifndef MHE_TRAINER_SAFETENSORS_H
#define MHE_TRAINER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_I32, ST_I64, ST_BF16, ST_F64, ST_U8, ST_F16 } StDtype;

#define ST_MAX_DIMS 4
typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;       // writer: caller's memory; reader: points into the loaded file
    size_t nbytes;
} StTensor;

typedef struct {
    int count, cap;
    StTensor *tensors;
    char *blob;             // reader: the whole file
    size_t blob_len;
} StFile;

size_t st_dtype_size(StDtype t);
const char *st_dtype_name(StDtype t);  // as in the header: "F32", "BF16", ...

// Writer: add tensors (data is not copied), then write.  Returns 0, or -1 with errno set.
void st_init(StFile *f);
void st_add(StFile *f, const char *name, StDtype dtype, int ndim, const int64_t *shape, const void *data);
int st_write(const StFile *f, const char *path);

// Reader: any malformed file is a user error ("path: byte N: ...", exit 2).
void st_read(StFile *f, const char *path);
const StTensor *st_find(const StFile *f, const char *name);
void st_free(StFile *f);

#endif

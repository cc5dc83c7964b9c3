// TensorBoard event files, written by hand (no protobuf or TensorFlow dependency).
//
// The file is a sequence of TFRecords: u64 length | u32 masked_crc32c(length bytes) | data |
// u32 masked_crc32c(data), little-endian.  Each record is a serialized tensorflow.Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first event carries file_version "brain.Event:2"; each scalar batch is one event.
#ifndef MHE_TRAINER_TENSORBOARD_H
#define MHE_TRAINER_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;
    char *path;
    unsigned char *buf;   // encoding scratch, grown only for unusually long tag lists
    size_t cap;
} TbWriter;

// Seconds since the epoch (what TensorBoard's wall_time means).
double tb_wall_time(void);

// Creates dir/events.out.tfevents.<seconds>.<hostname> (dir must exist; ".1", ".2", ... are
// appended rather than overwrite an existing file) and writes the file_version event.
// Returns 0, or -1 with errno set.
int tb_open(TbWriter *w, const char *dir, double wall_time);
// One event holding n scalars for `step`; flushed so a running TensorBoard sees it.
int tb_write_scalars(TbWriter *w, int64_t step, double wall_time, int n, const char *const *tags,
                     const float *values);
int tb_write_scalar(TbWriter *w, int64_t step, double wall_time, const char *tag, float value);
void tb_close(TbWriter *w);

#endif

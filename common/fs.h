// File-system helpers shared by the commands.
#ifndef MHE_COMMON_FS_H
#define MHE_COMMON_FS_H

#include <stddef.h>

// Creates `path` and its missing parents (like mkdir -p).  Exits with status 1 and a message
// naming the directory that could not be created.
void mhe_mkdirs(const char *path);

// "dir/file" into out (n bytes).  A path that does not fit is a user error (exit 2):
// "who: path too long: dir/file".
void mhe_path_join(char *out, size_t n, const char *dir, const char *file, const char *who);
// 1 when `path` is a regular file (links followed).
int mhe_is_file(const char *path);
// 1 when s ends with suffix (file kinds by extension: ".parquet", ".json", ".safetensors").
int mhe_has_suffix(const char *s, const char *suffix);
// Writes `len` bytes to `path` (created or truncated), or exits with status 1:
// "who: cannot write PATH: reason".
void mhe_write_file(const char *path, const void *data, size_t len, const char *who);
// `src` copied whole to `dst` (mhe_read_file, then mhe_write_file).
void mhe_copy_file(const char *src, const char *dst, const char *who);
// Removes `path` and everything below it, links not followed; what cannot be removed stays.
void mhe_remove_tree(const char *path);

// Output folders written whole (export, import, convert).  The files go into a staging folder
// beside the target (".NAME.partial-PID", the same file system) and the folder is renamed into
// place only once complete; an existing target is swapped out in one atomic exchange
// (renameat2 RENAME_EXCHANGE; two renames where the file system lacks it).  Whatever fails
// before the commit -- a full disk, a read-only file, a refusal -- leaves the previous target
// untouched, and the staging folder is removed at exit.  A staging folder of the same target left
// by a process that no longer runs (kill -9) is removed by the next begin, which says so.
#define MHE_OUTDIR_PATH_MAX 4096
typedef struct {
    char target[MHE_OUTDIR_PATH_MAX];      // as given, trailing slashes dropped
    char target_abs[MHE_OUTDIR_PATH_MAX];  // absolute, for files that must name the final folder
    char staging[MHE_OUTDIR_PATH_MAX];     // where to write
} MheOutDir;

// Refuses (exit 2, naming `who` and the folder) a target that is not a directory (a symbolic
// link, named as such), or a non-empty one unless `force`; creates the parents and the staging
// folder.
void mhe_outdir_begin(MheOutDir *o, const char *target, int force, const char *who);
// Renames the staging folder into place (exit 1 with the reason when that fails).
void mhe_outdir_commit(MheOutDir *o);
// 1 when `inner` is `outer` or lies inside it (both resolved; 0 when either does not exist).
int mhe_path_within(const char *inner, const char *outer);

#endif

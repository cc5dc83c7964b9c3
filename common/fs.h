// File-system helpers shared by the commands.
#ifndef MHE_COMMON_FS_H
#define MHE_COMMON_FS_H

// Creates `path` and its missing parents (like mkdir -p).  Exits with status 1 and a message
// naming the directory that could not be created.
void mhe_mkdirs(const char *path);

#endif

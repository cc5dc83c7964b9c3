#include "common/fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"

void mhe_mkdirs(const char *path) {
    size_t n = strlen(path);
    char *buf = mhe_malloc(n + 1);
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        const int end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            struct stat st;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) mhe_fatal("%s: cannot create directory: %s", buf, strerror(errno));
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) mhe_fatal("%s: exists and is not a directory", buf);
            if (end) break;
            *p = '/';
        }
    }
    free(buf);
}

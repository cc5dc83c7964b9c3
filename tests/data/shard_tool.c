// Test helper: reads shards through ShardReader (the C side of the Python compatibility
// tests) and opens loaders on them.
//   shard_tool dump PREFIX [VOCAB]    one line per sequence: its ids
//   shard_tool check PREFIX VOCAB     validates, checks ids < VOCAB, prints "ok S N"
//   shard_tool write PREFIX VOCAB     stdin lines of ids -> shard (one sequence per line)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/shard.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: shard_tool dump|check|write PREFIX [VOCAB]\n");
        return 1;
    }
    int vocab = argc > 3 ? atoi(argv[3]) : 0;
    if (strcmp(argv[1], "write") == 0) {
        ShardWriter *w = shard_writer_open(argv[2], vocab);
        char line[1 << 16];
        int32_t *ids = mhe_malloc(sizeof line * sizeof(int32_t));
        while (fgets(line, sizeof line, stdin)) {
            size_t n = 0;
            for (char *p = strtok(line, " \n"); p; p = strtok(NULL, " \n")) ids[n++] = atoi(p);
            shard_writer_add(w, ids, n);
        }
        shard_writer_close(w);
        free(ids);
        return 0;
    }
    ShardReader *r = shard_reader_open(argv[2]);
    if (vocab > 0) shard_reader_check_ids(r, vocab);
    if (strcmp(argv[1], "check") == 0) {
        printf("ok %lld %lld\n", (long long)r->n_seq, (long long)r->n_tokens);
    } else {
        for (int64_t s = 0; s < r->n_seq; s++) {
            for (int64_t j = 0; j < r->lengths[s]; j++)
                printf(j ? " %d" : "%d", shard_reader_token(r, s, j));
            printf("\n");
        }
    }
    shard_reader_close(r);
    return 0;
}

// Ranks agree or stop (DESIGN.md §6).  Data-parallel ranks must train the same model on the same
// data with the same settings; one that differs (a stale config or corpus on one node) would
// otherwise crash inside MPI/NCCL on mismatched buffers, or train silently on something else.
// Each rank describes itself as a text in config_write_yaml's layout ("section:" lines, then
// "  key: value"); the ranks compare one 64-bit hash of it in a single fixed-size all-gather
// (nothing else is exchanged when they agree).  On a mismatch the texts are gathered and rank 0
// prints one line naming every differing key with rank 0's value and the other rank's; every
// rank then exits with the input-error status, before any collective whose size depends on it.
#ifndef MHE_TRAINER_RANK_AGREE_H
#define MHE_TRAINER_RANK_AGREE_H

#include <stdint.h>

#include "comm/comm.h"
#include "data/loader.h"
#include "trainer/model/params.h"

// Lines of keys that may differ between ranks (runtime.threads: cores differ between nodes)
// are left out of the comparison.  `what` names the stage in the message ("config").
void rank_agree(Comm *comm, const char *what, const char *text);

// The text rank_agree compares for a run's model and data: the resolved config (config_yaml),
// the parameter table's layout and, when given, the loaders' digests.  malloc'd.
char *rank_agree_text(const char *config_yaml, const ParamTable *t, const Loader *train, const Loader *valid);
// rank_agree over the resolved config and the model's parameter layout (built from cfg): the
// first check of train and finetune, before any collective that could go differently.
void rank_agree_model(Comm *comm, const char *config_yaml, const Config *cfg);
// The same for files read whole (fine-tuning's task files and tokenizer): the config and, per
// file named by keys[i], its size and a hash of its bytes ("missing" when it cannot be read).
char *rank_agree_files_text(const char *config_yaml, int n, const char *const *keys, const char *const *paths);

// A refusal each rank decides from what only it can see (its own copy of a checkpoint named by a
// path the ranks agree on: a stale copy on one node is caught there, not trained past from rank
// 0's).  Every rank passes its reason or NULL; when any rank has one, rank 0 prints the first
// ("rank N: " before it when N is not 0, and how many other ranks refused) and every rank exits
// with the input-error status.  One fixed-size all-gather when no rank refuses.
void rank_refuse_any(Comm *comm, const char *why);

#endif

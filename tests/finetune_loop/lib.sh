# Shared by the fine-tuning loop tests: the training tests' corpus fixture and tiny model
# (tests/train/lib.sh), and a small SST-2-layout task cut from the fixture's real text.
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
# make_task DIR: DIR/train.tsv and DIR/dev.tsv in GLUE SST-2's layout ("sentence<TAB>label"),
# lines of the fixture's text (Wikipedia sample and a book); label 1 when the line has more than
# 15 words (these tests check the loop's mechanics, not what it learns: tests/finetune has the
# benchmark-like tasks).
make_task() {
  mkdir -p "$1"
  $PY - "$CORPUS/text.txt" "$1" <<'PY'
import random, sys
lines = [l.strip().replace("\t", " ") for l in open(sys.argv[1], encoding="utf-8")]
lines = [l for l in lines if 20 <= len(l) <= 200]
rows = [(l, int(len(l.split()) > 15)) for l in lines]
random.Random(5).shuffle(rows)
for name, part in (("train", rows[:96]), ("dev", rows[96:144])):
    with open(f"{sys.argv[2]}/{name}.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for s, y in part:
            f.write(f"{s}\t{y}\n")
PY
}
# The task keys for make_task's files (append to DATA and the tiny config's keys).
task_args() {
  echo task.type=classification task.format=sst2 task.train_file="$1/train.tsv" task.dev_file="$1/dev.tsv" \
    task.epochs=2 train.steps=0 train.eval_every=0 train.global_batch=8 train.micro_batch=2 train.log_every=1 \
    train.keep_last=1
}

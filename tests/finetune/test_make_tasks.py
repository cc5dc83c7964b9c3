"""tests/finetune/make_tasks.py: deterministic for a seed, train and dev disjoint by document and
by text, the sizes and label balance it promises, and every file read both by trainer/task's
readers (task_dump) and by Hugging Face's processors (MRPC, SST-2, STS-B, SQuAD v2.0) with the
same counts; blanked questions filled with their answer are sentences of their context."""
import collections
import filecmp
import json
import os
import subprocess
import sys
import warnings

warnings.simplefilter("ignore")
from transformers.data.processors import glue as hf_glue  # noqa: E402
from transformers.data.processors import squad as hf_squad  # noqa: E402

import ftlib  # noqa: E402
from ftlib import check, dump, write_config  # noqa: E402

work = ftlib.workdir("maketasks")
script = os.path.join(ftlib.SRC, "tests", "finetune", "make_tasks.py")
data = os.path.join(ftlib.SRC, "..", "shared", "data")
if not os.path.isdir(data):
    data = "/work/shared/data"
mhetrain = os.environ.get("MHETRAIN", os.path.join(ftlib.SRC, "build", "mhetrain"))
N, NDEV, NS, NSDEV = 600, 120, 300, 80


def make(out, seed):
    subprocess.run([sys.executable, script, out, "--data", data, "--mhetrain", mhetrain, "--seed", str(seed),
                    "--train", str(N), "--dev", str(NDEV), "--span-train", str(NS), "--span-dev", str(NSDEV)],
                   check=True, capture_output=True)


a, b, c = (os.path.join(work, x) for x in ("a", "b", "c"))
make(a, 14)
make(b, 14)
make(c, 15)
cmp = filecmp.dircmp(a, b)
same = all(filecmp.cmp(os.path.join(a, t, f), os.path.join(b, t, f), shallow=False)
           for t in ("pair", "source", "distance", "blank") for f in os.listdir(os.path.join(a, t)))
check(same, "two runs with seed 14 differ")
check(not filecmp.cmp(os.path.join(a, "pair", "train.tsv"), os.path.join(c, "pair", "train.tsv"), shallow=False),
      "seeds 14 and 15 give the same pair task")
man = json.load(open(os.path.join(a, "manifest.json")))
tr, dv = set(man["documents"]["train"]), set(man["documents"]["dev"])
check(tr and dv and not tr & dv, "train and dev documents overlap")
check(any(x.startswith("book") for x in dv) and any(x.startswith("wiki") for x in dv), "dev lacks a source")

counts = {}
for task, t in man["tasks"].items():
    cfg = write_config(os.path.join(work, f"{task}.yaml"), {
        "type": t["type"], "format": t["format"], "train_file": os.path.join(a, t["train_file"]),
        "dev_file": os.path.join(a, t["dev_file"])})
    for split, want in (("train", NS if task == "blank" else N), ("dev", NSDEV if task == "blank" else NDEV)):
        ex = dump("examples", cfg, split)
        counts[task, split] = ex
        check(len(ex) == want if task != "blank" else 0.9 * want <= len(ex) <= want,
              f"{task} {split}: {len(ex)} examples, asked {want}")

# Hugging Face's processors read the same rows.
d = os.path.join(a, "pair")
check(len(hf_glue.MrpcProcessor().get_train_examples(d)) == N, "HF MrpcProcessor count")
check(len(hf_glue.Sst2Processor().get_dev_examples(os.path.join(a, "source"))) == NDEV, "HF Sst2Processor count")
check(len(hf_glue.StsbProcessor().get_train_examples(os.path.join(a, "distance"))) == N, "HF StsbProcessor count")
sq = hf_squad.SquadV2Processor().get_dev_examples(os.path.join(a, "blank"), filename="dev.json")
check(len(sq) == len(counts["blank", "dev"]), "HF SquadV2Processor count")

# Balance and disjointness.
for split in ("train", "dev"):
    lab = collections.Counter(e["label"] for e in counts["source", split])
    check(lab[0] == lab[1], f"source {split}: labels {dict(lab)} not balanced")
    lab = collections.Counter(e["label"] for e in counts["pair", split])
    check(0.4 <= lab[1] / sum(lab.values()) <= 0.6, f"pair {split}: labels {dict(lab)}")
    lev = collections.Counter(round(e["target"]) for e in counts["distance", split])
    check(sorted(lev) == [0, 1, 2, 3, 4, 5] and max(lev.values()) - min(lev.values()) <= 1,
          f"distance {split}: levels {dict(lev)}")
    imp = sum(e["impossible"] for e in counts["blank", split]) / len(counts["blank", split])
    check(0.25 <= imp <= 0.42, f"blank {split}: {imp:.2f} unanswerable")
for task in ("pair", "source", "distance"):
    texts = lambda s: {x for e in counts[task, s] for x in (e["a"], e["b"]) if x}  # noqa: E731
    shared = texts("train") & texts("dev")
    check(len(shared) <= 2, f"{task}: {len(shared)} sentences in both train and dev: {list(shared)[:3]}")
bad = 0
for split in ("train", "dev"):
    for e in counts["blank", split]:
        ok = e["question"].count("_____") == 1
        if not e["impossible"]:
            ctx = " ".join(e["words"])
            filled = " ".join(e["question"].replace("_____", e["answers"][0]["text"]).split())
            ok = ok and filled in ctx
        bad += not ok
check(bad == 0, f"blank: {bad} questions are not a blanked sentence of their context")
print(f"make_tasks: deterministic, {len(tr)} train / {len(dv)} dev documents, readers and HF processors agree; "
      f"balance ok")
ftlib.finish("finetune_make_tasks")

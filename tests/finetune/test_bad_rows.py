"""Every error of the task readers and of the task section of the config: exit status 2 and the
one-line "file:line: expected ..." message, checked word for word (a bad row is never skipped)."""
import json
import os

import ftlib
from ftlib import check, dump, write_config

work = ftlib.workdir("badrows")
n = [0]


def case(fmt, content, expected, typ="classification", name=None, task=None, split="train"):
    """Writes `content` as the train file of `fmt`, expects `expected` (with {f} for the path)."""
    n[0] += 1
    path = os.path.join(work, name or f"f{n[0]}")
    with open(path, "wb") as f:  # bytes: invalid UTF-8 as it is
        f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
    t = {"type": typ, "format": fmt, "train_file": path, "dev_file": path}
    t.update(task or {})
    cfg = write_config(os.path.join(work, f"c{n[0]}.yaml"), t)
    status, err = dump("examples", cfg, split, expect_fail=True)
    want = expected.format(f=path, c=cfg)
    check(status == 2 and err == want, f"{fmt}: expected status 2 and\n    {want}\n  got {status} and\n    {err}")


MRPC_HEAD = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
# GLUE TSV
case("cola", "gj04\t1\t\tGood.\ngj04\t0\t*\n",
     "{f}:2: expected 4 tab-separated columns (source, label, original mark, sentence (no header)), found 3")
case("cola", "index\tsentence\n0\tA test sentence.\n",
     "{f}:1: expected a labelled CoLA row (source, label, original mark, sentence (no header)), found the "
     "header 'index, sentence' of a GLUE test file: test files carry no labels and can neither train nor be evaluated")
case("cola", "gj04\t2\t\tGood.\n", "{f}:1: expected a label ('0', '1') in column 2, found '2'")
case("sst2", "index\tsentence\n0\tit is good\n",
     "{f}:1: expected the header of a labelled sst2 file (sentence, label; column 2 named 'label'), found 2 "
     "column(s) with 'sentence' there: GLUE test files carry no labels and can neither train nor be evaluated")
case("sst2", "sentence\tlabel\nfine\t1\n\nbad\t0\n",
     "{f}:3: expected 2 tab-separated columns (sentence, label), found 1")
case("mrpc", MRPC_HEAD + "1\t1\t2\ta\tb\n2\t1\t2\ta\tb\n",
     "{f}:3: expected a label ('0', '1') in column 1, found '2'")
case("mrpc", "", "{f}:1: expected the header row of a mrpc file (Quality, #1 ID, #2 ID, #1 String, #2 String), found an empty file")
case("mrpc", MRPC_HEAD, "{f}: expected at least one example, found none")
case("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\tq1\n",
     "{f}:2: expected 6 tab-separated columns (id, qid1, qid2, question1, question2, is_duplicate), found 4")
case("stsb", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
     "0\tg\tf\t2012\t0\ts\ts\ta\tb\tfive\n",
     "{f}:2: expected a number in the last column (the stsb score), found 'five'", typ="regression")
case("mnli", "index\tpromptID\tpairID\tgenre\tp1\tp2\tp3\tp4\tsentence1\tsentence2\tlabel1\tgold_label\n"
     "0\t1\t1e\tg\tx\tx\tx\tx\ta\tb\tneutral\tmaybe\n",
     "{f}:2: expected a label ('contradiction', 'entailment', 'neutral') in column 12, found 'maybe'")
case("rte", "index\tsentence1\tsentence2\n0\ta\tb\n",
     "{f}:1: expected the header of a labelled rte file (index, sentence1, sentence2, label; column 3 named "
     "'label'), found 3 column(s) with 'sentence2' there: GLUE test files carry no labels and can neither "
     "train nor be evaluated")
# SuperGLUE JSONL
case("boolq", '{"question": "q", "passage": "p", "label": true}\n{"question": "q", "passage": \n',
     "{f}:2:30: expected one JSON object per line (invalid JSON here)")
case("boolq", '[1, 2]\n', "{f}:1: expected one JSON object per line")
case("boolq", '{"question": "q", "passage": "p", "idx": 0}\n',
     '{f}:1: expected a label field "label" (SuperGLUE test files carry no labels and can neither train nor be evaluated)')
case("boolq", '{"question": "q", "passage": "p", "label": "yes"}\n',
     "{f}:1: expected \"label\" to be one of false, true, found 'yes'")
case("cb", '{"premise": "p", "hypothesis": "h", "label": "maybe"}\n',
     "{f}:1: expected \"label\" to be one of entailment, contradiction, neutral, found 'maybe'")
case("superglue_rte", '{"premise": "p", "label": "entailment"}\n',
     '{f}:1: expected a string field "hypothesis" (superglue_rte)')
case("wic", '{"word": 3, "sentence1": "a", "sentence2": "b", "label": false}\n',
     '{f}:1: expected a string field "word" (WiC), found another JSON type')
case("wic", '{"word": "w", "sentence1": "a", "sentence2": "b", "label": [1]}\n',
     "{f}:1: expected \"label\" to be one of false, true, found another JSON type")
# Generic
G = {"text_a": "s1", "text_b": "s2", "label_column": "y", "labels": "no,yes"}
case("tsv", "s1\ty\nx\tno\n", "{f}:1: expected a header row naming the column 's2' (task.text_b), found 's1', 'y'", task=G)
case("tsv", "s1\ts2\ty\nx\tz\tyes\nx\tz\tperhaps\n",
     "{f}:3: expected a label of task.labels (no,yes) in column 'y', found 'perhaps'", task=G)
case("tsv", "s1\ts2\ty\nx\tz\n", "{f}:2: expected 3 tab-separated columns (as the header), found 2", task=G)
case("tsv", "s1\ty\nx\t1.5x\n", "{f}:2: expected a number in column 'y', found '1.5x'", typ="regression",
     task={"text_a": "s1", "label_column": "y"})
case("jsonl", '{"s1": "a", "s2": "b", "y": "yes"}\n{"s1": "a", "s2": "b"}\n',
     '{f}:2: expected a label field "y" (task.label_column)', task=G)
case("jsonl", '{"s1": "a", "y": true}\n', "{f}:1: expected a number in \"y\" (the regression target)",
     typ="regression", task={"text_a": "s1", "label_column": "y"})


# SQuAD
def squad(qas, ctx="The cat sat on the mat in 1895.", version="v2.0"):
    return json.dumps({"version": version, "data": [{"title": "t", "paragraphs": [{"context": ctx, "qas": qas}]}]},
                      indent=1)


case("squad2", squad([{"id": "q1", "question": "Where?", "answers": [{"text": "mat", "answer_start": 20}],
                       "is_impossible": False}]),
     "{f}:11: expected the answer text 'mat' at answer_start 20 of the context, found 'at ' in question 'q1'",
     typ="span")
case("squad2", squad([{"id": "q1", "question": "Where?", "answers": [{"text": "mat", "answer_start": 40}]}]),
     "{f}:11: expected a non-empty answer text inside the context at answer_start 40 (the context has 31 "
     "characters) in question 'q1'", typ="span")
case("squad1", squad([{"id": "q7", "question": "Who?", "answers": [], "is_impossible": True}], version="1.1"),
     "{f}:11: expected answerable questions in a squad1 file, found is_impossible in question 'q7' (use "
     "task.format squad2)", typ="span")
case("squad2", squad([{"id": "q2", "question": "Who?", "answers": []}]),
     "{f}:11: expected at least one answer in question 'q2' (or is_impossible: true in squad2)", typ="span")
case("squad2", squad([{"id": "q3", "answers": []}]),
     "{f}:11: expected \"question\": a string in question 'q3'", typ="span")
case("squad2", '{"version": "v2.0", "data": [\n {"title": "t",, }]}',
     "{f}:2:17: expected SQuAD JSON (invalid JSON here)", typ="span")
case("squad2", '{"version": "v2.0"}', '{f}:1: expected a JSON object with "data": a list of articles (SQuAD layout)',
     typ="span")
case("squad1", squad([{"id": "q4", "question": "When?", "answers": [{"text": "1895", "answer_start": "27"}]}]),
     "{f}:11: expected \"answer_start\": a character offset in question 'q4'", typ="span")

# Non-finite regression targets in JSONL (issue 32: exited 0 with inf/NaN in finetune_result.json).
R = {"text_a": "s1", "label_column": "y"}
case("jsonl", '{"s1": "a", "y": 0.5}\n{"s1": "b", "y": 1e39}\n',
     '{f}:2: expected a finite number in "y" (the regression target), found 1e+39, which is not finite in single '
     'precision', typ="regression", task=R)
case("jsonl", '{"s1": "a", "y": -1e400}\n',
     '{f}:1: expected a finite number in "y" (the regression target), found -inf, which is not finite in single '
     'precision', typ="regression", task=R)
# More after the JSON value (was: the rest of the line, here a whole example, dropped silently).
case("jsonl", '{"s1": "a", "y": 0.5}\n{"s1": "b", "y": 1}{"s1": "c", "y": 2}\n',
     "{f}:2:20: expected one JSON object per line, found more after it", typ="regression", task=R)
case("squad2", '{"version": "v2.0", "data": []}\n{"version": "v2.0"}\n',
     "{f}:2:1: expected SQuAD JSON to end after its object, found more", typ="span")
# Raw control bytes in JSON and NUL bytes anywhere (found by the fuzz pass: taken into the text, or
# the rest of a field cut off).
case("boolq", '{"question": "q", "passage": "a\x12b", "label": true}\n',
     "{f}:1:32: control byte 0x12: JSON must escape it (\\u0012)")
case("squad2", '{"version": "v2.0",\n "data": [{"title": "t\x01"}]}', "{f}:2:23: control byte 0x01: JSON must escape it (\\u0001)",
     typ="span")
case("sst2", b"sentence\tlabel\nfine\x00 film\t1\n", "{f}:2:5: NUL byte: expected text")
# The escape \u0000 decodes to a NUL that ended the field there, the rest silently gone (issue 50).
NUL = ": a NUL character (\\u0000) in a JSON string: the text would end there; remove or replace it"
case("boolq", '{"question": "q", "passage": "kept\\u0000lost", "label": true}\n', "{f}:1:35" + NUL)
case("squad2", '{"version": "v2.0",\n "data": [{"title": "t\\u0000"}]}', "{f}:2:23" + NUL, typ="span")
# Invalid UTF-8 with its line and column, in every reader (was: dropped silently).
U = ": fine-tuning text must be UTF-8, as prepare's inputs are (re-encode the file; nothing is dropped silently)"
case("sst2", b"sentence\tlabel\nfine\t1\nbad \xff here\t0\n", "{f}:3:5: invalid UTF-8 (byte 0xff)" + U)
case("jsonl", b'{"s2": "ok", "s1": "caf\xc3", "y": "no"}\n', "{f}:1:24: invalid UTF-8 (byte 0xc3)" + U, task=G)
case("boolq", b'{"question": "q", "passage": "\xe2\x82", "label": true}\n', "{f}:1:31: invalid UTF-8 (byte 0xe2)" + U)
case("squad2", b'{"version": "v2.0", "data": [{"title": "t\xc0\xaf", "paragraphs": []}]}',
     "{f}:1:42: invalid UTF-8 (byte 0xc0)" + U, typ="span")

# The task section of the config: errors point at the offending key as written (task keys start at
# line 8 of the file write_config makes).
def config_case(task, expected):
    n[0] += 1
    cfg = write_config(os.path.join(work, f"c{n[0]}.yaml"), task)
    status, err = dump("examples", cfg, "train", expect_fail=True)
    want = expected.format(c=cfg)
    check(status == 2 and err == want, f"config: expected status 2 and\n    {want}\n  got {status} and\n    {err}")


F = {"train_file": "t.tsv", "dev_file": "d.tsv"}
config_case(dict(type="classification", format="glue", **F),
            "{c}:9:11: task.format: expected one of cola, sst2, mrpc, qqp, stsb, mnli, mnli_mm, qnli, rte, wnli, "
            "boolq, cb, superglue_rte, wic, squad1, squad2, tsv, jsonl, found 'glue'")
config_case(dict(type="regression", format="cola", **F),
            "{c}:8:9: task.format cola is a classification task, but task.type is regression")
config_case(dict(type="classification", format="cola", train_file="t.tsv"),
            "{c}:8:9: task.dev_file is required for task.type classification")
config_case(dict(type="classification", format="tsv", text_a="s", label_column="y", **F),
            "{c}:9:11: task.labels: expected 2 to 8 comma-separated label strings for a tsv classification "
            "task, found ''")
config_case(dict(type="classification", format="mnli", metric="f1", **F),
            "{c}:10:11: task.metric: expected one of accuracy, f1_macro, mcc, acc_and_f1_macro for format "
            "mnli, found 'f1'")
config_case(dict(type="regression", format="stsb", metric="mse", **F),
            "{c}:10:11: task.metric: mse cannot choose the best epoch (the highest primary metric wins); use "
            "pearson, spearman or corr (it is reported anyway)")
config_case(dict(type="regression", format="stsb", metric="f1", **F),
            "{c}:10:11: task.metric: expected one of pearson, spearman, corr for format stsb, found 'f1'")
config_case(dict(type="classification", format="mnli", num_labels=2, **F),
            "{c}:10:15: task.num_labels is 2, but task.format mnli has 3")
config_case(dict(type="span", format="squad2", doc_stride=100, **F),
            "{c}:10:15: task.doc_stride (100) must be <= the context window max_seq - max_query_len - 3 = 61, "
            "or context tokens would fall between windows")
config_case(dict(type="span", format="tsv", text_a="s", label_column="y", **F),
            "{c}:8:9: task.format tsv reads classification or regression tasks; span tasks use squad1 or squad2")
config_case(dict(type="classification", format="sst2", labels="a,b", **F),
            "{c}:10:11: task.labels is for generic classification (tsv/jsonl); format sst2 defines its own labels")

print(f"{n[0]} error cases")
ftlib.finish("finetune_bad_rows")

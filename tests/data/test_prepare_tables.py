"""`mhetrain prepare` on parquet shards, Arrow files (a `datasets` cache) and JSON lines on
standard input: the same documents and the same tokens as the JSON-lines path.

Oracles: the documents are real text (the shared Wikipedia dump and a book, cleaned by
`prepare --text-out`), written here with pyarrow in the layouts Hugging Face uses; the expected
documents are known from construction (a title line the rows repeat must be dropped), and the
shards of every layout must be byte-identical to the ones of a JSON-lines file of the same rows
(whose tokens tests/data and tests/tokenizer check against Hugging Face `tokenizers`).

usage: test_prepare_tables.py   (MHETRAIN, MHE_SOURCE_DIR; run with the .venv's Python)
"""
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_prepare import BERT_VOCAB, BOOKS, DUMP, MHETRAIN, check, expect_fail, read_docs, run  # noqa: E402


def prepare(inputs, out, extra=(), stdin=None, env=None):
    args = [MHETRAIN, "prepare", "--threads", "2", "--tokenizer", BERT_VOCAB, "--out", out,
            "--text-out", out + ".txt", "--valid-docs-per-source", "5", "--valid-min-tokens", "1000"]
    p = subprocess.run(args + list(extra) + list(inputs), capture_output=True, text=True, input=stdin, env=env)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args + list(extra) + list(inputs))} exited {p.returncode}\n{p.stderr}")
    return p


def same_corpus(a, b, what):
    files = sorted(f for f in os.listdir(a) if f.endswith((".bin", ".idx")))
    check(files and files == sorted(f for f in os.listdir(b) if f.endswith((".bin", ".idx"))), f"{what}: shard files")
    for f in files:
        check(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False), f"{what}: {f} differs from JSON lines")
    check(open(a + ".txt", "rb").read() == open(b + ".txt", "rb").read(), f"{what}: documents differ from JSON lines")
    print(f"ok {what}: same documents and shards as JSON lines")


def main():
    tmp = tempfile.mkdtemp(prefix="mhe_data_tables_")
    try:
        run_all(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(tmp):
    # Real documents: the Wikipedia dump's articles and the books' chapters, cleaned by prepare.
    clean = os.path.join(tmp, "clean.txt")
    run([MHETRAIN, "prepare", "--text-out", clean, DUMP, BOOKS])
    bodies = read_docs(clean)
    check(len(bodies) > 300, f"{len(bodies)} documents: want more than a record batch (256 rows)")
    # Rows as wikimedia/wikipedia has them (id, url, title, text); every third repeats its title
    # as the text's first line (the readers drop it), every seventh has a null title.
    rows = []
    for i, body in enumerate(bodies):
        title = None if i % 7 == 3 else "Document %d" % i
        text = (title + "\n" + body) if (title and i % 3 == 0) else body
        rows.append({"id": str(i), "url": "https://example.org/%d" % i, "title": title, "text": text})
    table = pa.Table.from_pylist(rows)
    jsonl = os.path.join(tmp, "rows.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    ref = os.path.join(tmp, "ref")
    prepare([jsonl], ref)
    check(read_docs(ref + ".txt") == bodies, "JSON lines: the documents are not the bodies (title lines not dropped?)")
    print(f"ok JSON lines: {len(bodies)} documents, title lines dropped")

    # Hub layout: parquet shards in a folder beside a README.md (metadata, skipped), small row groups.
    hub = os.path.join(tmp, "hub", "20231101.en")
    os.makedirs(hub)
    half = len(rows) // 2
    pq.write_table(table.slice(0, half), os.path.join(hub, "train-00000-of-00002.parquet"), row_group_size=100)
    pq.write_table(table.slice(half), os.path.join(hub, "train-00001-of-00002.parquet"), row_group_size=100,
                   compression="zstd")
    open(os.path.join(tmp, "hub", "README.md"), "w").write("---\nlicense: cc-by-sa-3.0\n---\n# a dataset card\n")
    out = os.path.join(tmp, "parquet")
    prepare([os.path.join(tmp, "hub")], out)
    same_corpus(out, ref, "parquet shards (hub folder)")

    # `datasets` cache (save_to_disk / the Arrow cache): IPC stream files + dataset_info.json, state.json.
    cache = os.path.join(tmp, "cache")
    os.makedirs(cache)
    for k, part in enumerate((table.slice(0, half), table.slice(half))):
        with pa.OSFile(os.path.join(cache, "data-%05d-of-00002.arrow" % k), "wb") as f:
            w = pa.ipc.new_stream(f, table.schema)
            w.write_table(part, max_chunksize=64)
            w.close()
    json.dump({"features": {}}, open(os.path.join(cache, "dataset_info.json"), "w"))
    json.dump({"_data_files": []}, open(os.path.join(cache, "state.json"), "w"))
    out = os.path.join(tmp, "arrow")
    prepare([cache], out)
    same_corpus(out, ref, "Arrow stream files (datasets cache folder)")

    # The Arrow IPC file format, under a name without extension (found by its magic), as one input.
    ipc = os.path.join(tmp, "table_file")
    with pa.OSFile(ipc, "wb") as f:
        w = pa.ipc.new_file(f, table.schema)
        w.write_table(table, max_chunksize=100)
        w.close()
    out = os.path.join(tmp, "ipcfile")
    prepare([ipc], out)
    same_corpus(out, ref, "Arrow IPC file (detected by content)")

    # JSON lines on standard input.
    out = os.path.join(tmp, "stdin")
    prepare(["-"], out, stdin=open(jsonl, encoding="utf-8").read())
    same_corpus(out, ref, "JSON lines on standard input")

    # Other column names, large_string columns: --text-column / --title-column, both formats.
    renamed = pa.table({"name": pa.array([r["title"] for r in rows], pa.large_string()),
                        "body": pa.array([r["text"] for r in rows], pa.large_string())})
    pq.write_table(renamed, os.path.join(tmp, "renamed.parquet"))
    with open(os.path.join(tmp, "renamed.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"name": r["title"], "body": r["text"]}, ensure_ascii=False) + "\n")
    cols = ["--text-column", "body", "--title-column", "name"]
    out = os.path.join(tmp, "renamed")
    prepare([os.path.join(tmp, "renamed.parquet")], out, cols)
    same_corpus(out, ref, "parquet with --text-column body --title-column name")
    out = os.path.join(tmp, "renamed_jsonl")
    prepare([os.path.join(tmp, "renamed.jsonl")], out, cols)
    same_corpus(out, ref, "JSON lines with --text-column body --title-column name")

    # Bad input: one line naming the file and what was expected, exit 2.
    base = [MHETRAIN, "prepare", "--text-out", os.path.join(tmp, "bad.txt")]
    p0 = os.path.join(tmp, "hub", "20231101.en", "train-00000-of-00002.parquet")
    expect_fail(base + ["--text-column", "content", p0],
                re.escape(p0) + r': no column "content" \(columns: id, url, title, text\)', "missing text column")
    nul = os.path.join(tmp, "null.parquet")
    pq.write_table(pa.table({"text": ["a", "b", None]}), nul)
    expect_fail(base + [nul], re.escape(nul) + r': row 3: column "text" is null', "null text")
    num = os.path.join(tmp, "num.arrow")
    with pa.OSFile(num, "wb") as f:
        w = pa.ipc.new_stream(f, pa.schema([("text", pa.int64())]))
        w.write_table(pa.table({"text": [1, 2]}))
        w.close()
    expect_fail(base + [num], re.escape(num) + r': column "text" is int64, expected a string column', "integer text column")
    cut = os.path.join(tmp, "cut.parquet")
    open(cut, "wb").write(open(p0, "rb").read()[:5000])
    expect_fail(base + [cut], re.escape(cut) + r": not a readable parquet file: ", "truncated parquet")
    expect_fail(base + ["--format", "wiki", "-"], r"standard input is read as JSON lines", "stdin with --format wiki")
    expect_fail(base + ["-", "-"], r"given 2 times", "stdin twice")
    env = dict(os.environ, MHE_PYTHON=os.path.join(tmp, "no-such-python"))
    p = subprocess.run(base + [p0], capture_output=True, text=True, env=env)
    check(p.returncode == 2 and "cannot run" in p.stderr and "MHE_PYTHON" in p.stderr and p.stderr.count("\n") == 1,
          f"missing interpreter: exit {p.returncode}, {p.stderr!r}")
    print("ok missing interpreter:", p.stderr.strip())
    if subprocess.run(["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True).returncode != 0:
        os.environ["MHE_PYTHON"] = "/usr/bin/python3"
        expect_fail(base + [p0], re.escape(p0) + r": reading parquet files needs pyarrow in /usr/bin/python3",
                    "a Python without pyarrow")
        del os.environ["MHE_PYTHON"]
    print("prepare_tables ok")


if __name__ == "__main__":
    main()

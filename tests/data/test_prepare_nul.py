"""The input account, and NUL characters never cut a document, and parquet's bad rows are named by their row in the
file (issue 50: a NUL in a JSON-lines or parquet text field ended the document there, the rest
gone without a word; invalid UTF-8 was reported at the first row of its 256-row batch).

- JSON lines: the escape \\u0000 becomes U+FFFD, the document is whole (the text after it is
  kept), prepare prints how many and manifest.json counts them (reading.nul_characters_replaced);
  an escaped backslash before "u0000" is text and stays as it is; a raw NUL byte (not JSON) is
  refused with file, line and column.
- Parquet: a NUL inside a text value, the same as JSON lines (the bridge escapes it);
  invalid UTF-8 in row 300 (the second record batch) is reported as row 300 with its column.

usage: test_prepare_nul.py   (MHETRAIN, MHE_SOURCE_DIR; run with the .venv's Python)
"""
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
from test_prepare import BERT_VOCAB, MHETRAIN, check, expect_fail, read_docs  # noqa: E402


def prepare(inputs, out):
    args = [MHETRAIN, "prepare", "--tokenizer", BERT_VOCAB, "--out", out, "--text-out", out + ".txt",
            "--valid-docs-per-source", "1", "--valid-min-tokens", "1"] + inputs
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 0, f"{' '.join(args)} exited {p.returncode}\n{p.stderr}")
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="mhe_data_nul_")
    try:
        run_all(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(tmp):
    docs = ["The first document keeps its text before\u0000and after the NUL.",
            "A second one with two\u0000NULs\u0000inside.",
            "A backslash before u0000 is text: \\u0000 stays.",
            "The last document has none."]
    jsonl = os.path.join(tmp, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")  # ensure_ascii: NUL written as \u0000
    check("\\u0000" in open(jsonl).read(), "the fixture holds the escape")
    out = os.path.join(tmp, "j")
    p = prepare([jsonl], out)
    want = [d.replace("\u0000", "\ufffd") for d in docs]
    check(read_docs(out + ".txt") == want, f"documents cut or changed: {read_docs(out + '.txt')}")
    check("prepare: 3 NUL characters (\\u0000) in the text replaced by U+FFFD" in p.stderr, p.stderr)
    m = json.load(open(os.path.join(out, "manifest.json")))
    check(m["reading"]["nul_characters_replaced"] == 3, f"manifest: {m['reading']}")
    print("ok JSON lines: \\u0000 replaced by U+FFFD and counted, documents whole")

    raw = os.path.join(tmp, "raw.jsonl")
    with open(raw, "wb") as f:
        f.write(b'{"text": "fine"}\n{"text": "cut\x00here"}\n')
    expect_fail([MHETRAIN, "prepare", "--text-out", os.path.join(tmp, "raw.txt"), raw],
                raw.replace(".", "\\.") + r":2:14: a raw NUL byte: JSON strings must escape control characters",
                "raw NUL byte in JSON lines")
    print("ok JSON lines: a raw NUL byte refused with line and column")

    pdocs = ["alpha\u0000beta gamma", "second row"]
    parquet = os.path.join(tmp, "nul.parquet")
    pq.write_table(pa.table({"text": pa.array(pdocs)}), parquet)
    out = os.path.join(tmp, "p")
    p = prepare([parquet], out)
    check(read_docs(out + ".txt") == [d.replace("\u0000", "\ufffd") for d in pdocs], f"parquet: {read_docs(out + '.txt')}")
    check("prepare: 1 NUL characters" in p.stderr, p.stderr)
    print("ok parquet: NUL replaced and counted, document whole")

    # Invalid UTF-8 in row 300 (1-based): the bridge reads 256-row batches.
    values = [("row %d" % i).encode() for i in range(1, 601)]
    values[299] = b"bad \xff here"
    bad = os.path.join(tmp, "bad.parquet")
    pq.write_table(pa.table({"text": pa.array(values, type=pa.binary()).view(pa.string())}), bad)
    expect_fail([MHETRAIN, "prepare", "--text-out", os.path.join(tmp, "bad.txt"), bad],
                bad.replace(".", "\\.") + r": row 300: invalid UTF-8 in column \"text\"", "parquet invalid UTF-8")
    print("ok parquet: invalid UTF-8 named by its row in the file")

    # The input account: per file, bytes read (the file's own size for plain text and JSON lines)
    # and bytes kept (the documents' text, as --text-out has it), in manifest.json and one line;
    # a file that keeps less than half of its bytes is named in a warning with the reasons.
    book = os.path.join(tmp, "book.txt")
    with open(book, "w", encoding="utf-8") as f:
        f.write("The Project Gutenberg EBook of a test\n\n*** START OF THIS PROJECT GUTENBERG EBOOK TEST ***\n\n"
                "Only this short paragraph is the book.\n\n*** END OF THIS PROJECT GUTENBERG EBOOK TEST ***\n\n"
                + "Licence text of the kind every Gutenberg file ends with. " * 40 + "\n")
    out = os.path.join(tmp, "a")
    p = prepare([book, jsonl], out)
    m = json.load(open(os.path.join(out, "manifest.json")))
    acc = {os.path.basename(i["path"]): i["account"] for i in m["inputs"]}
    book_docs = ["Only this short paragraph is the book."]
    check(acc["book.txt"]["bytes_read"] == os.path.getsize(book), f"book bytes_read: {acc['book.txt']}")
    check(acc["book.txt"]["bytes_kept"] == sum(len(d.encode()) for d in book_docs), f"book bytes_kept: {acc['book.txt']}")
    check(acc["book.txt"]["documents_kept"] == 1, f"book documents: {acc['book.txt']}")
    jdocs = [d.replace("\u0000", "\ufffd") for d in docs]
    check(acc["docs.jsonl"]["bytes_read"] == os.path.getsize(jsonl), f"jsonl bytes_read: {acc['docs.jsonl']}")
    check(acc["docs.jsonl"]["bytes_kept"] == sum(len(d.encode()) for d in jdocs), f"jsonl bytes_kept: {acc['docs.jsonl']}")
    check(read_docs(out + ".txt") == book_docs + jdocs, "documents")
    total_in = os.path.getsize(book) + os.path.getsize(jsonl)
    check(m["reading"]["bytes_read"] == total_in, f"reading: {m['reading']}")
    check(re.search(r"prepare: warning: %s: kept 38 of %d bytes \(\d+\.\d%%\) in 1 documents \(.*Project Gutenberg header, "
                    r"licence" % (re.escape(book), os.path.getsize(book)), p.stderr), p.stderr)
    check(len(re.findall(r"warning: .*: kept ", p.stderr)) == 1, f"one account warning, for the book: {p.stderr}")
    check("prepare: input account: read %d bytes of text" % total_in in p.stderr, p.stderr)
    print("ok input account: bytes read and kept per file, warning for the book that keeps little")

    # A named pipe as an input was read twice (format detection, then the reader): its start
    # lost, then "no documents found".  Refused by name before anything is read.
    fifo = os.path.join(tmp, "pipe.txt")
    os.mkfifo(fifo)
    expect_fail([MHETRAIN, "prepare", "--text-out", os.path.join(tmp, "fifo.txt"), fifo],
                re.escape(fifo) + r": not a regular file or folder \(a pipe or a device\?\)", "a named pipe as input")


if __name__ == "__main__":
    main()

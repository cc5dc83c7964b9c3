"""NUL characters never cut a document, and parquet's bad rows are named by their row in the
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


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Malformed tokenizer files: each must end `mhetrain tokenizer encode` with exit status 2 and
one line "file:line:col: ..." (or "file: ...") saying what was expected."""
import json
import os
import re
import subprocess
import sys

MHETRAIN = os.environ["MHETRAIN"]
WORK = os.path.join(os.environ.get("MHE_BINARY_DIR", "/tmp"), "tokenizer_bad_inputs")

GOOD_VOCAB = {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<|endoftext|>": 4}


def case(name, files, entry, want, err_file=None):
    d = os.path.join(WORK, name)
    os.makedirs(d, exist_ok=True)
    for fname, content in files.items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("ab ab\n")
    path = os.path.join(d, entry)
    r = subprocess.run([MHETRAIN, "tokenizer", "encode", path, text], capture_output=True)
    err = r.stderr.decode().strip()
    want_re = re.escape(os.path.join(d, err_file or entry)) + want
    ok = r.returncode == 2 and re.fullmatch(want_re, err) is not None and "\n" not in err
    print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {r.returncode}: {err}")
    if not ok:
        print(f"     wanted exit 2 and /{want_re}/")
    return ok


def main():
    ok = True
    vj = json.dumps(GOOD_VOCAB)
    ok &= case("vocab_txt_invalid_utf8", {"vocab.txt": b"[UNK]\nhello\nwor\xffld\n"}, "vocab.txt",
               r":3:4: invalid UTF-8 \(byte 0xff\)")
    ok &= case("vocab_txt_duplicate", {"vocab.txt": "[UNK]\nhello\n[PAD]\nhello\n"}, "vocab.txt",
               r':4:1: duplicate token "hello" \(first on line 2\)')
    ok &= case("vocab_txt_blank_line", {"vocab.txt": "[UNK]\n\nhello\n"}, "vocab.txt",
               r":2:1: empty token \(expected one token per line\)")
    ok &= case("vocab_json_syntax", {"vocab.json": '{"a": 0,\n "b": 1\n "ab": 2}', "merges.txt": "a b\n"},
               "vocab.json", r":3:2: invalid JSON \(expected a JSON value here\)")
    ok &= case("vocab_json_gap", {"vocab.json": '{"a": 0, "b": 5}', "merges.txt": ""}, "vocab.json",
               r': token "b" has id 5 but there are only 2 tokens \(expected ids 0..1 without gaps\)')
    ok &= case("merges_three_fields", {"vocab.json": vj, "merges.txt": "#version: 0.2\na b\na b ab\n"},
               "vocab.json", r":3:1: expected two tokens separated by one space", "merges.txt")
    ok &= case("merges_unknown_token", {"vocab.json": vj, "merges.txt": "#version: 0.2\na b\nb zz\n"},
               "vocab.json", r':3:3: merge token "zz" is not in \S*/vocab\.json', "merges.txt")
    # "b" + "a" = "ba" is not a token: the message shows exactly "ba" (it once printed the
    # heap bytes after the unterminated concatenation).
    ok &= case("merges_unknown_result", {"vocab.json": vj, "merges.txt": "#version: 0.2\na b\nb a\n"},
               "vocab.json", r':3:1: merged token "ba" is not in \S*/vocab\.json', "merges.txt")
    base = {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "model": {"type": "BPE", "vocab": GOOD_VOCAB, "merges": ["a b"]}}
    no_vocab = json.loads(json.dumps(base))
    del no_vocab["model"]["vocab"]
    ok &= case("tokenizer_json_missing_vocab", {"tokenizer.json": json.dumps(no_vocab)}, "tokenizer.json",
               r": model.vocab: expected an object \{\"token\": id\}")
    bad_special = json.loads(json.dumps(base))
    bad_special["added_tokens"] = [{"id": 5, "content": "<|im_end|>", "special": True}]
    ok &= case("tokenizer_json_unknown_special", {"tokenizer.json": json.dumps(bad_special)},
               "tokenizer.json",
               r': added_tokens\[0\]: unknown special token "<\|im_end\|>" \(id 5; the vocabulary does not have it\)')
    truncated = json.dumps(base)[:-20]
    ok &= case("tokenizer_json_truncated", {"tokenizer.json": truncated}, "tokenizer.json",
               r":1:\d+: invalid JSON \(expected a JSON value here\)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

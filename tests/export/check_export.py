"""Loads every export listed in cases.json with Hugging Face transformers and compares it with
mhetrain's side (see test_export.c, which asserts on the results this writes).

usage: check_export.py cases.json lines.txt results.json

Per case, from DIR (written by `mhetrain export`), DIR.ids.txt (our tokenizer's ids per line)
and DIR.ours.safetensors (our padded input_ids, attention_mask and logits [B, T, V]):
  class            the class AutoModelFor{MaskedLM,CausalLM}.from_pretrained built
  missing_keys / unexpected_keys / mismatched_keys   from output_loading_info
  tokenizer_class  AutoTokenizer's class; ids_equal: its ids == ours on every line
  rel_err          ||ours - theirs|| / ||theirs|| over the full logits (float64 sums)
  ref_norm         ||theirs||
  generate_ok      (CLM) greedy generate() continues a 5-token prompt with our argmax
A case that raises records {"error": "..."} instead.
"""
import json
import sys
import traceback

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer


def check(case, lines):
    d = case["dir"]
    r = {}
    tok = AutoTokenizer.from_pretrained(d)
    r["tokenizer_class"] = type(tok).__name__
    ours_ids = [[int(x) for x in ln.split()] for ln in open(d + ".ids.txt")]
    theirs_ids = [tok(line)["input_ids"] for line in lines]
    r["ids_equal"] = ours_ids == theirs_ids
    if not r["ids_equal"]:
        for k, (a, b) in enumerate(zip(ours_ids, theirs_ids)):
            if a != b:
                r["ids_mismatch"] = {"line": k, "ours": a, "theirs": b}
                break

    auto = AutoModelForMaskedLM if case["arch"] == "bert" else AutoModelForCausalLM
    model, info = auto.from_pretrained(d, trust_remote_code=case["remote"], output_loading_info=True)
    model.eval()
    r["class"] = type(model).__name__
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        r[k] = [str(x) for x in info.get(k, [])]

    ours = load_file(d + ".ours.safetensors")
    ids = torch.from_numpy(ours["input_ids"].astype(np.int64))
    mask = torch.from_numpy(ours["attention_mask"].astype(np.int64))
    extra = {}
    if "token_type_ids" in ours:
        extra["token_type_ids"] = torch.from_numpy(ours["token_type_ids"].astype(np.int64))
    with torch.no_grad():
        theirs = model(input_ids=ids, attention_mask=mask, **extra).logits.double().numpy()
    mine = ours["logits"].astype(np.float64)
    if case["arch"] == "gpt":
        # Greedy decoding: the first new token is the argmax of the logits at the prompt's end.
        with torch.no_grad():
            gen = model.generate(ids[:1, :5], attention_mask=mask[:1, :5], max_new_tokens=2, do_sample=False,
                                 pad_token_id=int(ids[0, 0]))
        r["generate_ok"] = bool(int(gen[0, 5]) == int(np.argmax(ours["logits"][0, 4])))
    if mine.shape != theirs.shape:
        raise ValueError(f"logits shape: ours {mine.shape}, theirs {theirs.shape}")
    r["ref_norm"] = float(np.linalg.norm(theirs))
    r["rel_err"] = float(np.linalg.norm(mine - theirs) / r["ref_norm"])
    return r


def main():
    cases_path, lines_path, out_path = sys.argv[1:4]
    torch.set_num_threads(2)
    cases = json.load(open(cases_path))
    lines = open(lines_path, encoding="utf-8").read().split("\n")
    results = {}
    for case in cases:
        try:
            r = check(case, lines[: len(open(case["dir"] + ".ids.txt").readlines())])
        except Exception as e:  # recorded and asserted on by the C test, which names the case
            traceback.print_exc()
            r = {"error": f"{type(e).__name__}: {e}"}
        results[case["name"]] = r
        print(case["name"], json.dumps({k: v for k, v in r.items() if k != "ids_mismatch"}), flush=True)
    json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()

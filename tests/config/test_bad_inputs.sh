#!/usr/bin/env bash
# Every bad input in bad/ (and bad command-line overrides) must fail with exit status 2 and one
# line on stderr: the exact "file:line:col: " prefix followed by a message naming the problem.
set -u
: "${MHETRAIN:?set MHETRAIN to the mhetrain binary}"
: "${MHE_SOURCE_DIR:?set MHE_SOURCE_DIR to the source tree}"
cd "$MHE_SOURCE_DIR/tests/config/bad"
# Errors exit on the spot by design (mhe_fail_at); under ASan the memory still held then is
# not a leak worth reporting.  Successful loads run with leak checks in the other tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
failures=0
cases=0

# expect <prefix> <phrase> <command args...>
expect() {
    local prefix="$1" phrase="$2"
    shift 2
    cases=$((cases + 1))
    local out err rc
    out=$("$MHETRAIN" "$@" 2>/tmp/mhe_config_err.$$)
    rc=$?
    err=$(cat /tmp/mhe_config_err.$$)
    local why=""
    if [ "$rc" -ne 2 ]; then why="exit status $rc, expected 2"
    elif [ -n "$out" ]; then why="unexpected stdout: $out"
    elif [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then why="expected one stderr line"
    elif [ "${err#"$prefix"}" = "$err" ]; then why="expected the prefix '$prefix'"
    elif [[ "$err" != *"$phrase"* ]]; then why="expected the phrase '$phrase'"
    fi
    if [ -n "$why" ]; then
        echo "FAIL: mhetrain $*: $why; stderr: $err"
        failures=$((failures + 1))
    else
        echo "ok: mhetrain $*: $err"
    fi
}

dry() { expect "$1" "$2" train "$3" --dry-run "${@:4}"; }

dry "unknown_key.yaml:3:3: " "unknown key 'hiden' in section model" unknown_key.yaml
dry "unknown_section.yaml:3:1: " "unknown section 'modle'" unknown_section.yaml
dry "wrong_type.yaml:2:11: " "model.layers: expected an integer, found 'four'" wrong_type.yaml
dry "wrong_type_list.yaml:2:11: " "model.hidden: expected an integer, found a list" wrong_type_list.yaml
dry "quoted_number.yaml:2:10: " "train.steps: expected an integer, found the string '100'" quoted_number.yaml
dry "negative_layers.yaml:2:11: " "model.layers must be in [1, 10000], got -1" negative_layers.yaml
dry "dropout_range.yaml:2:12: " "model.dropout must be in [0, 1)" dropout_range.yaml
dry "mask_prob_range.yaml:2:14: " "objective.mask_prob must be in (0, 1)" mask_prob_range.yaml
dry "lr_zero.yaml:2:7: " "optim.lr must be > 0" lr_zero.yaml
dry "zero_stage.yaml:2:9: " "dist.zero must be in [0, 1]" zero_stage.yaml
dry "bad_enum.yaml:2:9: " "attention.type: expected one of mha, sha, mhe_add, mhe_mul" bad_enum.yaml
dry "recompute.yaml:3:14: " "train.recompute: expected one of none, attention, layer, found 'full'" recompute.yaml
dry "bad_bool.yaml:2:14: " "attention.fast_path: expected true or false" bad_bool.yaml
dry "el_att_shape.yaml:4:13: " "el_att needs model.heads * model.head_dim = model.hidden" el_att_shape.yaml
dry "gqa_groups.yaml:5:11: " "attention.groups (3) must divide model.heads (4)" gqa_groups.yaml
dry "micro_batch.yaml:3:16: " "train.micro_batch (12) must divide train.global_batch (32)" micro_batch.yaml
dry "seq_len.yaml:4:12: " "data.seq_len (128) must be <= model.max_seq (64)" seq_len.yaml
dry "arch_objective.yaml:4:9: " "objective.type mlm needs model.arch bert" arch_objective.yaml
dry "heads_divide.yaml:3:10: " "model.hidden (100) must be divisible by model.heads (8)" heads_divide.yaml
dry "cycle_b.yaml:1:7: " "base cycle: cycle_a.yaml -> cycle_b.yaml -> cycle_a.yaml" cycle_a.yaml
dry "missing_base.yaml:1:7: " "cannot read base file 'no_such_file.yaml'" missing_base.yaml
dry "malformed.yaml:3:9: " "malformed YAML: did not find expected ',' or ']'" malformed.yaml
dry "bad_indent.yaml:3:2: " "malformed YAML: did not find expected key" bad_indent.yaml
dry "duplicate_key.yaml:3:3: " "duplicate key 'layers'" duplicate_key.yaml
dry "top_level_list.yaml:1:1: " "expected a mapping of sections" top_level_list.yaml
dry "steps_tokens.yaml:2:10: " "train.steps (10) contradicts train.tokens" steps_tokens.yaml
# An error inherited from a base file points into the base file.
dry "sub/bad_base.yaml:3:13: " "model.init_std must be > 0" child_of_bad_base.yaml
dry "no_such_config.yaml: " "cannot read config file" no_such_config.yaml
# Command-line overrides: same typing, attributed to the argument.
dry "<command line>:arg1: " "model.layers: expected an integer, found 'abc'" valid.yaml model.layers=abc
dry "<command line>:arg2: " "unknown key 'hidn' in section model" valid.yaml model.layers=3 model.hidn=64
dry "<command line>:arg1: " "expected section.key=value" valid.yaml model.layers
dry "<command line>:arg1: " "unknown section 'modl'" valid.yaml modl.layers=3
dry "<command line>:arg1: " "attention.groups: expected an integer, found a list" valid.yaml "attention.groups=[1]"
dry "<command line>:arg1: " "malformed YAML value" valid.yaml "data.train=[a,"
dry "<command line>:arg1: " "train.recompute: expected one of none, attention, layer" valid.yaml train.recompute=full
# Numbers accept exactly README's forms (common/num.h), in files, overrides and options alike:
# strtod's hex, hex floats and leading spaces, and fractions for counts, were taken before.
dry "<command line>:arg1: " "model.layers: expected an integer, found '0x4'" valid.yaml model.layers=0x4
dry "<command line>:arg1: " "optim.lr: expected a finite number, found '0x1p-10'" valid.yaml optim.lr=0x1p-10
dry "<command line>:arg1: " "train.steps: expected an integer, found '1_000'" valid.yaml train.steps=1_000
dry "<command line>:arg1: " "optim.lr: expected a finite number, found '.inf'" valid.yaml optim.lr=.inf
dry "<command line>:arg1: " "train.steps: expected an integer in [" valid.yaml train.steps=1e30
expect "mhetrain: " 'train: --stop-after expects an integer in [1, 9223372036854775807], got " 5"' train valid.yaml --dry-run --stop-after " 5"
expect "mhetrain: " 'prepare: --threads expects an integer in [1, 256], got "2.5"' prepare --threads 2.5 --out /nonexistent x
expect "mhetrain: " 'prepare: --seed expects an integer in [0, 9223372036854775807], got "0x10"' prepare --seed 0x10 --out /nonexistent x
expect "mhetrain: " 'tokenizer train: --vocab-size expects an integer in [0, 100000000], got "+ 100"' tokenizer train --type bpe --vocab-size "+ 100" --out /nonexistent x
expect "mhetrain: " 'convert: --tol expects a number in [0, 1], got "nan"' convert x --to gqa --tol nan --out /nonexistent
# An override that makes the shape inconsistent is reported at the override.
dry "<command line>:arg2: " "el_att needs model.heads * model.head_dim = model.hidden" valid.yaml attention.type=el_att model.head_dim=16
expect "<command line>:arg1: " "train.micro_batch (5) must divide" params valid.yaml train.micro_batch=5
# Nesting beyond the limit is refused while parsing, at the first level too deep, not after
# loading the whole (quadratic) tree: a 400 KB file of brackets took 68 s before.
deep_dir=$(mktemp -d)
/usr/bin/python3 -c "print('a: ' + '[' * 200000 + ']' * 200000)" >"$deep_dir/deep.yaml"
t0=$SECONDS
dry "$deep_dir/deep.yaml:1:20: " "YAML nested too deeply (more than 16 levels)" "$deep_dir/deep.yaml"
if [ $((SECONDS - t0)) -gt 10 ]; then echo "FAIL: the deep file took $((SECONDS - t0)) s to reject"; failures=$((failures + 1)); fi
rm -rf "$deep_dir"

rm -f /tmp/mhe_config_err.$$
echo "$cases cases, $failures failures"
[ "$failures" -eq 0 ] && [ "$cases" -ge 12 ]

#!/usr/bin/env bash
# Every YAML file shipped in configs/ validates, and its resolved form (train --dry-run) loads
# back to the same resolved form.  Data files need not exist for validation.
set -u
: "${MHETRAIN:?set MHETRAIN to the mhetrain binary}"
: "${MHE_SOURCE_DIR:?set MHE_SOURCE_DIR to the source tree}"
cd "$MHE_SOURCE_DIR/configs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
n=0
# Every registered attention type (mhetrain info --attention-types) has its tiny and BERT-base
# config; file names spell the type with '-'.
types=$("$MHETRAIN" info --attention-types | cut -f1)
[ -n "$types" ] || { echo "FAIL: mhetrain info --attention-types lists no type"; failures=$((failures + 1)); }
for t in $types; do
    v=${t//_/-}
    for f in "bert-base-$v.yaml" "tiny-bert-$v.yaml"; do
        [ -f "$f" ] || { echo "FAIL: missing configs/$f"; failures=$((failures + 1)); continue; }
        "$MHETRAIN" train "$f" --dry-run 2>/dev/null | grep -qxF "  type: $t" \
            || { echo "FAIL: configs/$f does not resolve to attention.type $t"; failures=$((failures + 1)); }
    done
done
for f in gpt2-small-mha.yaml gpt2-small-mhe-mul.yaml quickstart.yaml; do
    [ -f "$f" ] || { echo "FAIL: missing configs/$f"; failures=$((failures + 1)); }
done
for f in *.yaml; do
    n=$((n + 1))
    if ! "$MHETRAIN" train "$f" --dry-run > "$tmp/a.yaml" 2> "$tmp/err"; then
        echo "FAIL: $f does not validate: $(cat "$tmp/err")"
        failures=$((failures + 1))
        continue
    fi
    if ! "$MHETRAIN" train "$tmp/a.yaml" --dry-run > "$tmp/b.yaml" 2> "$tmp/err"; then
        echo "FAIL: the resolved form of $f does not load: $(cat "$tmp/err")"
        failures=$((failures + 1))
        continue
    fi
    # The first line names the source file; everything after it must be identical.
    if ! diff <(tail -n +2 "$tmp/a.yaml") <(tail -n +2 "$tmp/b.yaml") > "$tmp/diff"; then
        echo "FAIL: $f: resolved config changes when reloaded:"; cat "$tmp/diff"
        failures=$((failures + 1))
        continue
    fi
    echo "ok: $f"
done

# The quickstart default: a tiny MHE-MUL MLM BERT on the corpus under corpus/.
"$MHETRAIN" train quickstart.yaml --dry-run > "$tmp/q.yaml"
for want in "  arch: bert" "  type: mhe_mul" "  type: mlm" '  train: ["corpus/shards/train"]' \
            '  valid: ["corpus/shards/valid"]' '  tokenizer: "corpus/tokenizer/tokenizer.json"' \
            '  out_dir: "out/quickstart"' "  device: cpu"; do
    grep -qxF "$want" "$tmp/q.yaml" || { echo "FAIL: quickstart.yaml resolves without '$want'"; failures=$((failures + 1)); }
done
layers=$(sed -n 's/^  layers: //p' "$tmp/q.yaml")
hidden=$(sed -n 's/^  hidden: //p' "$tmp/q.yaml")
if [ "$layers" -lt 2 ] || [ "$layers" -gt 4 ] || [ "$hidden" -lt 128 ] || [ "$hidden" -gt 256 ]; then
    echo "FAIL: quickstart is not tiny: layers $layers, hidden $hidden"
    failures=$((failures + 1))
fi

# configs/README.md's key reference is exactly what the field table prints, and every key of
# a resolved config has its row there.
readme="$MHE_SOURCE_DIR/configs/README.md"
"$MHETRAIN" info --config-reference > "$tmp/ref.md"
sed -n '/^<!-- config-reference:/,/^<!-- end of config-reference -->/p' "$readme" \
    | sed '1,/-->$/d;$d' > "$tmp/readme-ref.md"
if ! diff "$tmp/ref.md" "$tmp/readme-ref.md" > "$tmp/diff"; then
    echo "FAIL: configs/README.md's key reference differs from the field table (< table, > README);"
    echo "      run tests/config/update_reference.sh"
    cat "$tmp/diff"
    failures=$((failures + 1))
fi
# README.md's table of attention types is the registry's (tests/config/attention_table.sh).
bash "$MHE_SOURCE_DIR/tests/config/attention_table.sh" "$MHETRAIN" > "$tmp/types.md"
sed -n '/^<!-- attention-types:/,/^<!-- end of attention-types -->/p' "$MHE_SOURCE_DIR/README.md" \
    | sed '1,/-->$/d;$d' > "$tmp/readme-types.md"
if ! diff "$tmp/types.md" "$tmp/readme-types.md" > "$tmp/diff"; then
    echo "FAIL: README.md's attention types differ from the registry (< registry, > README);"
    echo "      run tests/config/update_reference.sh"
    cat "$tmp/diff"
    failures=$((failures + 1))
fi
section=""
while IFS= read -r line; do
    case "$line" in
        "#"*) ;;
        "  "*) key=${line#  }; key=${key%%:*}
               awk -v s="### $section" -v k="| \`$key\` |" '$0 == s { on = 1; next } /^##/ { on = 0 } on && index($0, k) == 1 { found = 1 } END { exit !found }' "$tmp/readme-ref.md" \
                   || { echo "FAIL: $section.$key has no row in configs/README.md"; failures=$((failures + 1)); } ;;
        *) section=${line%%:*} ;;
    esac
done < "$tmp/q.yaml"

echo "$n configs, $failures failures"
[ "$failures" -eq 0 ] && [ "$n" -ge 20 ]

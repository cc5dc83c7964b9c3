#!/usr/bin/env bash
# mhetrain params against independent numbers: the MHE paper's attention-parameter table,
# DESIGN.md §1's per-sublayer formulas (computed here in shell arithmetic), and the published
# parameter counts of Hugging Face BertForMaskedLM (bert-base-uncased) and GPT2LMHeadModel.
set -u
: "${MHETRAIN:?set MHETRAIN to the mhetrain binary}"
: "${MHE_SOURCE_DIR:?set MHE_SOURCE_DIR to the source tree}"
cd "$MHE_SOURCE_DIR/configs"
failures=0

# value <label> <config> [overrides...]: the integer after "<label>: " in mhetrain params.
value() {
    local label="$1"
    shift
    "$MHETRAIN" params "$@" | sed -n "s/^$label: \([0-9]*\)$/\1/p"
}
check() {
    local what="$1" got="$2" want="$3"
    if [ "$got" = "$want" ]; then echo "ok: $what = $got"
    else echo "FAIL: $what = '$got', expected $want"; failures=$((failures + 1)); fi
}

# The paper's table: attention weight matrices (+ head embeddings) of BERT-base, no biases.
attn="attention weights (no biases)"
check "bert-base SHA"     "$(value "$attn" bert-base-sha.yaml)"     8847360
check "bert-base MHA"     "$(value "$attn" bert-base-mha.yaml)"     28311552
check "bert-base EL-ATT"  "$(value "$attn" bert-base-el-att.yaml)"  14155776
check "bert-base MQA"     "$(value "$attn" bert-base-mqa.yaml)"     15335424
check "bert-base SKV"     "$(value "$attn" bert-base-skv.yaml)"     21233664
check "bert-base MHE-ADD" "$(value "$attn" bert-base-mhe-add.yaml)" 8875008
check "bert-base MHE-MUL" "$(value "$attn" bert-base-mhe-mul.yaml)" 8875008

# Per attention sublayer at D=512.
per="attention weights per layer (no biases)"
check "MHA D=512 n=8 d=64"   "$(value "$per" bert-base-mha.yaml model.hidden=512 model.heads=8 model.head_dim=64)" 1048576
check "MHE D=512 n=8 d=64"   "$(value "$per" bert-base-mhe-mul.yaml model.hidden=512 model.heads=8 model.head_dim=64)" 361984
check "MHE D=512 n=16 d=32"  "$(value "$per" bert-base-mhe-add.yaml model.hidden=512 model.heads=16 model.head_dim=32)" 312832
check "MHE D=512 n=4 d=128"  "$(value "$per" bert-base-mhe-mul.yaml model.hidden=512 model.heads=4 model.head_dim=128)" 460288
# The paper's translation table: 18 attention sublayers of D=512.
check "MHA 18 x D=512" "$(value "$attn" bert-base-mha.yaml model.layers=18 model.hidden=512 model.heads=8)" 18874368
check "MHE 18 x D=512" "$(value "$attn" bert-base-mhe-mul.yaml model.layers=18 model.hidden=512 model.heads=8)" 6515712

# GQA and collab against DESIGN.md §1, with the sizes read from the resolved config.
resolved=$("$MHETRAIN" train bert-base-gqa.yaml --dry-run)
L=$(sed -n 's/^  layers: //p' <<< "$resolved"); D=$(sed -n 's/^  hidden: //p' <<< "$resolved")
n=$(sed -n 's/^  heads: //p' <<< "$resolved"); d=$(sed -n 's/^  head_dim: //p' <<< "$resolved")
g=$(sed -n 's/^  groups: //p' <<< "$resolved")
check "bert-base GQA (g=$g): L(2 D nd + 2 D g d)" "$(value "$attn" bert-base-gqa.yaml)" \
    $((L * (2 * D * n * d + 2 * D * g * d)))
check "GQA g=n equals MHA" "$(value "$attn" bert-base-gqa.yaml attention.groups=12)" 28311552
check "GQA g=1 equals MQA" "$(value "$attn" bert-base-gqa.yaml attention.groups=1)" 15335424
resolved=$("$MHETRAIN" train bert-base-collab.yaml --dry-run)
Dt=$(sed -n 's/^  collab_dim: //p' <<< "$resolved")
check "bert-base collab (D~=$Dt): L(2 D D~ + n D~ + D n + 2 D nd)" "$(value "$attn" bert-base-collab.yaml)" \
    $((L * (2 * D * Dt + n * Dt + D * n + 2 * D * n * d)))
check "collab D~=256, d=32 per layer" \
    "$(value "$per" bert-base-collab.yaml attention.collab_dim=256 model.head_dim=32)" \
    $((2 * 768 * 256 + 12 * 256 + 768 * 12 + 2 * 768 * 12 * 32))

# Every registered type (mhetrain info --attention-types) with a head size other than D/n
# (D=96, n=6, d=20, g=3, D~=40, d_c=24, d_q=10) against §1's table; a type without its formula
# here fails.
D=96; n=6; d=20; g=3; Dt=40; dc=24; dq=10; nd=$((n * d))
for t in $("$MHETRAIN" info --attention-types | cut -f1); do
    dd=$d; [ $t = el_att ] && dd=16  # el_att needs n*d = D
    nd=$((n * dd))
    case $t in
        mha) want=$((4 * D * nd)) ;;
        sha) want=$((3 * D * dd + nd * D)) ;;
        mhe_add|mhe_mul) want=$((3 * D * dd + nd * D + 3 * n * dd)) ;;
        mqa) want=$((2 * D * nd + 2 * D * dd)) ;;
        gqa) want=$((2 * D * nd + 2 * D * g * dd)) ;;
        el_att) want=$((2 * D * nd)) ;;
        skv) want=$((3 * D * nd)) ;;
        collab) want=$((2 * D * Dt + n * Dt + D * n + D * nd + nd * D)) ;;
        mla) want=$((D * dc + 2 * dc * nd + D * nd + nd * D)) ;;
        *) echo "FAIL: no parameter-count formula for attention type $t (DESIGN.md §1)"
           failures=$((failures + 1)); continue ;;
    esac
    check "$t per layer at D=$D n=$n d=$dd" \
        "$(value "$per" tiny-bert.yaml attention.type=$t model.hidden=$D model.heads=$n \
            model.head_dim=$dd attention.groups=$g attention.collab_dim=$Dt attention.latent_dim=$dc)" "$want"
done
# mla with its queries through their own latent: W_DQ (D×d_q) and W_UQ (d_q×nd) replace W_Q.
nd=$((n * d))
check "mla with q_latent_dim per layer at D=$D n=$n d=$d" \
    "$(value "$per" tiny-bert.yaml attention.type=mla model.hidden=$D model.heads=$n model.head_dim=$d \
        attention.latent_dim=$dc attention.q_latent_dim=$dq)" \
    $((D * dc + 2 * dc * nd + D * dq + dq * nd + nd * D))
# BERT-base mla (d_c = 4d = 256): 12 · (768·256 + 2·256·768 + 2·768·768).
check "bert-base mla attention weights" "$(value "attention weights (no biases)" bert-base-mla.yaml)" 21233664

# Whole models: the published counts of the Hugging Face reference models.
check "bert-base MHA, all parameters (BertForMaskedLM)" "$(value "all parameters" bert-base-mha.yaml)" 109514298
check "gpt2-small MHA, all parameters (GPT2LMHeadModel)" "$(value "all parameters" gpt2-small-mha.yaml)" 124439808

# Layout of the listing: groups, one exact attention line, and tensor lines that add up.
out=$("$MHETRAIN" params tiny-bert-mhe-mul.yaml)
for heading in "embeddings" "layer 0" "layer 3" "  attention" "  norms" "  ffn" "head"; do
    grep -qxF "$heading" <<< "$out" || { echo "FAIL: no '$heading' heading"; failures=$((failures + 1)); }
done
check "lines 'attention weights (no biases): N'" "$(grep -c '^attention weights (no biases): [0-9][0-9]*$' <<< "$out")" 1
sum=$(awk '/^    [a-z]/ { s += $NF } END { print s }' <<< "$out")
check "sum of the tensor lines" "$sum" "$(sed -n 's/^all parameters: //p' <<< "$out")"
check "params --help exit status" "$("$MHETRAIN" params --help > /dev/null; echo $?)" 0

echo "$failures failures"
[ "$failures" -eq 0 ]

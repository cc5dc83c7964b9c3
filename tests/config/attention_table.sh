#!/usr/bin/env bash
# The README's table of attention types, as markdown, from the registry:
# tests/config/attention_table.sh path/to/mhetrain
set -euo pipefail
"$1" info --attention-types | awk -F'\t' '
  BEGIN { print "| type | its own keys | what |"; print "|---|---|---|" }
  { keys = ($3 == "-") ? "" : "`" $3 "`"; gsub(/ /, "`, `", keys); printf "| `%s` | %s | %s |\n", $1, keys, $4 }'

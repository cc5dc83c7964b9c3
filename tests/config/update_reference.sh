#!/usr/bin/env bash
# Rewrites the generated key reference of configs/README.md (between its config-reference
# markers) from the field table: tests/config/update_reference.sh [path/to/mhetrain]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exe="${1:-$here/build/mhetrain}"
readme="$here/configs/README.md"
ref=$(mktemp)
trap 'rm -f "$ref" "$ref.new"' EXIT
"$exe" info --config-reference > "$ref"
awk -v ref="$ref" '
  /^<!-- end of config-reference -->/ { skip = 0 }
  !skip { print }
  /^<!-- config-reference:/ { inside = 1 }
  inside && /-->$/ { while ((getline line < ref) > 0) print line; skip = 1; inside = 0 }
' "$readme" > "$ref.new"
mv "$ref.new" "$readme"

# README.md's table of attention types (between its attention-types markers) from the registry.
readme="$here/README.md"
bash "$here/tests/config/attention_table.sh" "$exe" > "$ref"
awk -v ref="$ref" '
  /^<!-- end of attention-types -->/ { skip = 0 }
  !skip { print }
  /^<!-- attention-types:/ { inside = 1 }
  inside && /-->$/ { while ((getline line < ref) > 0) print line; skip = 1; inside = 0 }
' "$readme" > "$ref.new"
mv "$ref.new" "$readme"

#!/usr/bin/env bash
# prepare --format wikiextractor reads both forms WikiExtractor writes: <doc> blocks and --json
# lines ({"id", "revid", "url", "title", "text"}, the title repeated as the text's first line or
# not).  The same two articles in each form give the same documents, byte for byte; a malformed
# JSON line is refused with its line and column (was: "expected <doc ...>" on every --json file).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
: "${MHETRAIN:?}"
mhe_workdir wikiextractor-json
cat >"$WORK/wiki_00" <<'DOC'
<doc id="12" url="https://en.wikipedia.org/wiki?curid=12" title="Anarchism">
Anarchism

Anarchism is a political philosophy &amp; movement that is sceptical of authority.

Humans lived in societies without formal hierarchies long before the establishment of states.
</doc>
<doc id="25" url="https://en.wikipedia.org/wiki?curid=25" title="Autism">
Autism

Autism is a neurodevelopmental disorder characterized by difficulties with social interaction &lt;and&gt; communication.
</doc>
DOC
{
  printf '%s\n' '{"id": "12", "revid": "1", "url": "https://en.wikipedia.org/wiki?curid=12", "title": "Anarchism", "text": "Anarchism\n\nAnarchism is a political philosophy &amp; movement that is sceptical of authority.\n\nHumans lived in societies without formal hierarchies long before the establishment of states.\n"}'
  echo
  printf '%s\n' '{"id": "25", "revid": "2", "url": "https://en.wikipedia.org/wiki?curid=25", "title": "Autism", "text": "Autism is a neurodevelopmental disorder characterized by difficulties with social interaction &lt;and&gt; communication.\n"}'
} >"$WORK/wiki_json_00"
"$MHETRAIN" prepare --format wikiextractor --text-out "$WORK/doc.txt" "$WORK/wiki_00" 2>"$WORK/doc.log" ||
  { cat "$WORK/doc.log"; fail "<doc> form"; }
"$MHETRAIN" prepare --format wikiextractor --text-out "$WORK/json.txt" "$WORK/wiki_json_00" 2>"$WORK/json.log" ||
  { cat "$WORK/json.log"; fail "--json form refused"; }
grep -q "political philosophy & movement" "$WORK/doc.txt" || { cat "$WORK/doc.txt"; fail "<doc> text not as expected"; }
grep -q "social interaction <and> communication" "$WORK/json.txt" || { cat "$WORK/json.txt"; fail "json: entities"; }
! grep -qx "Anarchism" "$WORK/json.txt" || fail "json: the title line was kept"
cmp "$WORK/doc.txt" "$WORK/json.txt" || { diff "$WORK/doc.txt" "$WORK/json.txt"; fail "the two forms differ"; }
printf '%s\n%s\n' '{"title": "A", "text": "fine"}' '{"title": "B", "text": 3}' >"$WORK/bad_json"
set +e
"$MHETRAIN" prepare --format wikiextractor --text-out "$WORK/bad.txt" "$WORK/bad_json" 2>"$WORK/bad.log"
status=$?
set -e
[ "$status" = 2 ] && grep -q "bad_json:2:1: expected a JSON object with a string \"text\" field (WikiExtractor --json)" \
  "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "bad --json line: exit $status"; }
echo PASS

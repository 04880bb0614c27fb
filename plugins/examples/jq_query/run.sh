# jq_query: stdin is {"json": "<document>", "filter": "<jq filter>"}; stdout is JSON.
set -euo pipefail
args=$(cat)
filter=$(jq -r .filter <<<"$args")
fail() { jq -cn --arg code "$1" --arg message "$2" '{error: {code: $code, message: $message}}'; exit 1; }

doc=$(jq -r .json <<<"$args")
jq -e . >/dev/null 2>&1 <<<"$doc" || fail invalid_json 'the "json" argument is not valid JSON'
if ! out=$(jq -c "$filter" 2>/tmp/err <<<"$doc"); then
  fail invalid_filter "jq: $(head -c 500 /tmp/err)"
fi
# One output as itself, several as an array, none as null.
jq -cs 'if length == 1 then .[0] elif length == 0 then null else . end' <<<"$out"

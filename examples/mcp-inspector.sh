#!/usr/bin/env bash
# Checks toolgate's MCP endpoint with the official MCP Inspector, headless (its --cli mode):
# lists the tools and calls calculator, as an MCP client such as an IDE agent would.
#
#   TOOLGATE_KEY=<key> bash examples/mcp-inspector.sh [http://127.0.0.1:8080]
#
# Needs only Node and the npm registry: npx fetches @modelcontextprotocol/inspector (pinned).
set -euo pipefail
URL=${1:-${TOOLGATE_URL:-http://127.0.0.1:8080}}
: "${TOOLGATE_KEY:?set TOOLGATE_KEY to a toolgate API key (the dev key is printed at start-up)}"
INSPECTOR=@modelcontextprotocol/inspector@2.12.0

inspect() {
  npx -y "$INSPECTOR" --cli "$URL/mcp" --transport http \
    --header "Authorization: Bearer $TOOLGATE_KEY" "$@"
}

echo "== tools/list (--strict: exits 6 if a tool schema has a portability problem)"
inspect --method tools/list --strict | node -e '
  let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    const { tools } = JSON.parse(s);
    for (const t of tools) console.log(`  ${t.name.padEnd(16)} ${t.description.slice(0, 70)}`);
    console.log(`  (${tools.length} tools)`);
  });'

echo "== tools/call calculator {\"expression\":\"2*(3+4)\"}"
inspect --method tools/call --tool-name calculator --tool-arg 'expression=2*(3+4)'

echo "== tools/call calculator {\"expression\":\"2*(\"} (a tool error the model can read)"
# The Inspector prints the isError result, then exits 1 with code tool_is_error: expected here.
inspect --method tools/call --tool-name calculator --tool-arg 'expression=2*(' || true

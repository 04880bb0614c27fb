/** `toolgate tools` and `toolgate call`: a running gateway's API from the command line. */
import { UsageError, type CliIo, type Command, type Parsed } from '../command.js';

export const CONNECTION_HELP = `  --url <url>  the gateway (default: $TOOLGATE_URL, else http://127.0.0.1:8080)
  --key <key>  the client key (default: $TOOLGATE_KEY); sent as Authorization: Bearer`;

export const CONNECTION_OPTIONS = {
  url: { type: 'string' },
  key: { type: 'string' },
} as const;

export function connection(parsed: Parsed, io: CliIo) {
  const url = (
    (typeof parsed.values.url === 'string' && parsed.values.url) ||
    io.env.TOOLGATE_URL ||
    'http://127.0.0.1:8080'
  ).replace(/\/+$/, '');
  const key =
    (typeof parsed.values.key === 'string' && parsed.values.key) || io.env.TOOLGATE_KEY || '';
  return { url, headers: key ? { authorization: `Bearer ${key}` } : {} };
}

/** fetch that turns "nothing listens there" into one readable line. */
export async function request(
  io: CliIo,
  url: string,
  init: RequestInit,
): Promise<{ status: number; body: unknown } | undefined> {
  let res: Response;
  try {
    res = await fetch(url, init);
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    io.err(
      `toolgate: cannot reach the gateway at ${new URL(url).origin} (${cause?.code ?? cause?.message ?? (err as Error).message}); set TOOLGATE_URL or start it with \`toolgate up\`\n`,
    );
    return undefined;
  }
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: shown as text
  }
  return { status: res.status, body };
}

/** An API error answer ({error: {code, message}}) as one line on stderr. */
export function printApiError(io: CliIo, status: number, body: unknown): void {
  const error = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
  io.err(
    error
      ? `toolgate: ${status} ${error.code ?? ''}: ${error.message ?? ''}\n`
      : `toolgate: HTTP ${status}: ${typeof body === 'string' ? body : JSON.stringify(body)}\n`,
  );
  if (status === 401)
    io.err('  (set TOOLGATE_KEY to a client key; `toolgate keys new` makes one)\n');
}

interface ListedTool {
  name: string;
  category: string;
  sandboxed: boolean;
  risk: string;
  requiresApproval: boolean;
}

export const toolsCommand: Command = {
  name: 'tools',
  summary: 'list the tools a running gateway offers this key',
  help: `usage: toolgate tools [--json] [--url <url>] [--key <key>]

  Lists the tools the key's client may call (GET /tools): name, category, whether it runs in a
  sandbox, its risk, and whether calls wait for an admin's approval.

  --json       print the gateway's answer (the native tool listing) as JSON
${CONNECTION_HELP}

Exit codes: 0 listed, 1 the gateway refused or cannot be reached, 2 bad usage.
`,
  options: { ...CONNECTION_OPTIONS, json: { type: 'boolean', default: false } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const { url, headers } = connection(parsed, io);
    const res = await request(io, `${url}/tools`, { headers });
    if (!res) return 1;
    if (res.status !== 200) {
      printApiError(io, res.status, res.body);
      return 1;
    }
    const tools = res.body as ListedTool[];
    if (parsed.values.json) {
      io.out(`${JSON.stringify(tools, null, 2)}\n`);
      return 0;
    }
    const rows = [
      ['NAME', 'CATEGORY', 'SANDBOXED', 'RISK'],
      ...tools.map((t) => [
        t.name,
        t.category,
        t.sandboxed ? 'yes' : 'no',
        t.requiresApproval ? `${t.risk} (approval)` : t.risk,
      ]),
    ];
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
    for (const row of rows)
      io.out(
        `${row
          .map((v, i) => v.padEnd(widths[i]!))
          .join('  ')
          .trimEnd()}\n`,
      );
    return 0;
  },
};

export const callCommand: Command = {
  name: 'call',
  summary: "call a tool through a running gateway: toolgate call TOOL '{json}'",
  help: `usage: toolgate call <tool> ['<json arguments>'] [--wait=false] [--url <url>] [--key <key>]

  Calls the tool (POST /tools/<tool>/execute) with the arguments (a JSON object; default {})
  and prints the outcome as JSON: {"id", "tool", "status", "result" | "error", ...}.
  With --wait=false the gateway queues the call and this prints {"id", "status"} at once; read
  the outcome later at GET /v1/calls/<id>.

  --wait <true|false>  wait for the outcome (default true)
${CONNECTION_HELP}

Exit codes: 0 the call succeeded (status ok, or queued with --wait=false), 1 the call failed
(status error, cancelled, or an API error such as 403/404/429) or the gateway cannot be
reached, 2 bad usage (e.g. arguments that are not a JSON object).

Example: toolgate call calculator '{"expression":"2+2"}'
`,
  options: { ...CONNECTION_OPTIONS, wait: { type: 'string', default: 'true' } },
  args: { min: 1, max: 2 },
  async run(parsed, io) {
    const [tool, text = '{}'] = parsed.positionals as [string, string?];
    const wait = parsed.values.wait;
    if (wait !== 'true' && wait !== 'false')
      throw new UsageError(`toolgate call: --wait must be true or false, got "${String(wait)}"`);
    let args: unknown;
    try {
      args = JSON.parse(text);
    } catch (err) {
      throw new UsageError(
        `toolgate call: the arguments are not valid JSON: ${(err as Error).message}`,
      );
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args))
      throw new UsageError('toolgate call: the arguments must be a JSON object, e.g. \'{"x": 1}\'');
    const { url, headers } = connection(parsed, io);
    const res = await request(
      io,
      `${url}/tools/${encodeURIComponent(tool)}/execute${wait === 'false' ? '?wait=false' : ''}`,
      {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify(args),
      },
    );
    if (!res) return 1;
    if (res.status === 202) {
      io.out(`${JSON.stringify(res.body, null, 2)}\n`);
      return 0;
    }
    if (res.status !== 200) {
      printApiError(io, res.status, res.body);
      return 1;
    }
    io.out(`${JSON.stringify(res.body, null, 2)}\n`);
    return (res.body as { status?: string }).status === 'ok' ? 0 : 1;
  },
};

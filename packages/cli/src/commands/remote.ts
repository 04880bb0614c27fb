/** `toolgate tools` and `toolgate call`: a running gateway's API from the command line. */
import { UsageError, colours, type CliIo, type Command, type Parsed } from '../command.js';
import {
  EXIT,
  exitCodeOf,
  exitCodeOfApiError,
  followCall,
  type CallAnswer,
  type Streamed,
} from '../follow-call.js';
import { DEFAULT_GATEWAY, GATEWAY_OPTIONS, gatewayOf } from '../remote/index.js';

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
  summary: "call a tool through a running gateway and follow it: toolgate call TOOL '{json}'",
  help: `usage: toolgate call <tool> ['<json arguments>'] [--detach] [--json] [--gateway <url>] [--key <key>]

  Calls the tool with the arguments (a JSON object; default {}).

  On a terminal the call is followed live: its stdout and stderr as they come, its progress as
  one line on stderr, then the result. Ctrl-C cancels the call (after 1 s) and waits for the
  gateway to confirm (exit 4); a second Ctrl-C within that second leaves the call running (its
  id on stdout, exit 130). A call parked for an admin's approval says so and waits for the decision.

  With --json, or when stdout is not a terminal, it prints one JSON outcome as the API answers
  it: {"id", "tool", "status", "result" | "error", "durationMs", "cached"}.

  --detach             start the call and print its id at once (--json or a pipe: {"id", "status"})
  --json               one JSON outcome, nothing live
  --wait <true|false>  --wait=false is --detach (kept for scripts)
  --gateway <url>      the gateway (default: $TOOLGATE_GATEWAY, the profile, else
                       ${DEFAULT_GATEWAY}); --url is the same
  --key <key>          the key (default: $TOOLGATE_KEY, else the profile's for its gateway)

Exit codes:
  0  the call succeeded (status ok), or was started with --detach
  1  the tool failed (its error code is printed), or an API error (401, 404, 429, …), or the
     gateway cannot be reached
  2  bad usage: arguments that are not a JSON object, or that the tool's schema refuses (400)
  3  refused: a policy (policy_denied), the key's scope (403 forbidden), or an admin rejected it
  4  cancelled (Ctrl-C, or by someone else), timed out, or its approval expired
  130  a second Ctrl-C: the call goes on; its id is printed

Example: toolgate call run_shell '{"command":"for i in 1 2 3; do echo step $i; sleep 1; done"}'
`,
  options: {
    gateway: GATEWAY_OPTIONS.gateway,
    url: GATEWAY_OPTIONS.url,
    key: GATEWAY_OPTIONS.key,
    wait: { type: 'string', default: 'true' },
    detach: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
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
    const detach = parsed.values.detach === true || wait === 'false';
    const json = parsed.values.json === true || !io.isTTY;
    const gw = gatewayOf(parsed, io);
    const { url, headers } = gw;
    // Scripts (--json, not a terminal) get the synchronous answer as before: the whole result,
    // which the stored copy may cut. A terminal starts the call and follows its event stream.
    const sync = json && !detach;
    const res = await request(
      io,
      `${url}/tools/${encodeURIComponent(tool)}/execute${sync ? '' : '?wait=false'}`,
      {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify(args),
      },
    );
    if (!res) return EXIT.toolError;
    if (res.status !== 200 && res.status !== 202) {
      printApiError(io, res.status, res.body);
      return exitCodeOfApiError(res.status, res.body);
    }
    // 200: the outcome already (a synchronous answer, a cached result).
    if (res.status === 200) return printOutcome(io, res.body as CallAnswer, json);
    const { id, status } = res.body as { id: string; status: string };
    if (detach) {
      if (json) io.out(`${JSON.stringify(res.body, null, 2)}\n`);
      else {
        io.out(`${id}\n`);
        io.err(`toolgate: call ${id} ${status}; follow it: toolgate calls logs ${id} -f\n`);
      }
      return EXIT.ok;
    }
    const followed = await followCall(io, {
      gw,
      id,
      status,
      live: !json,
      stderrIsTTY: io.stderrIsTTY === true,
    });
    if (typeof followed === 'number') return followed;
    return printOutcome(io, followed.answer, json, followed.streamed);
  },
};

/**
 * Prints a finished call and returns its exit code. JSON: the answer as the API gives it. A
 * terminal: the output the stream did not carry (all of it past the live cap, the sandbox's
 * verdict), the result, and one summary line on stderr.
 */
function printOutcome(
  io: CliIo,
  answer: CallAnswer,
  json: boolean,
  streamed: Streamed = { stdout: '', stderr: '' },
): number {
  const code = exitCodeOf(answer);
  if (json) {
    io.out(`${JSON.stringify(answer, null, 2)}\n`);
    return code;
  }
  const c = colours({ isTTY: io.stderrIsTTY === true, env: io.env });
  const result = answer.result as Record<string, unknown> | undefined;
  const program =
    typeof result === 'object' &&
    result !== null &&
    typeof result.stdout === 'string' &&
    typeof result.stderr === 'string';
  let detail = '';
  if (answer.status === 'ok' && program) {
    const rest = (all: string, seen: string) =>
      all.startsWith(seen) ? all.slice(seen.length) : all;
    const out = rest(result.stdout as string, streamed.stdout);
    const err = rest(result.stderr as string, streamed.stderr);
    if (out) io.out(out.endsWith('\n') ? out : `${out}\n`);
    if (err) io.err(err.endsWith('\n') ? err : `${err}\n`);
    if (typeof result.exitCode === 'number') detail = `, exit code ${result.exitCode}`;
  } else if (answer.status === 'ok') {
    io.out(
      typeof answer.result === 'string'
        ? `${answer.result}\n`
        : `${JSON.stringify(answer.result, null, 2)}\n`,
    );
  }
  const took = answer.durationMs === undefined ? '' : ` in ${formatMs(answer.durationMs)}`;
  const cached = answer.cached ? ' (cached)' : '';
  if (answer.status === 'ok')
    io.err(`${c.green(`✓ ${answer.tool} ok${took}${cached}${detail}`)}\n`);
  else {
    const why = answer.error
      ? `${answer.error.code ?? ''}: ${answer.error.message ?? ''}`
      : answer.status;
    io.err(`${c.red(`✗ ${answer.tool} ${answer.status}${took}: ${why}`)}\n`);
  }
  if (answer.resultTruncated)
    io.err(`${c.dim(`  (the stored result was cut: GET /v1/calls/${answer.id})`)}\n`);
  return code;
}

function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

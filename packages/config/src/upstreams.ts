/**
 * `upstreams:` — MCP servers whose tools toolgate serves behind its own pipeline
 * (docs/upstreams.md): Streamable HTTP (`url:`), or a stdio server run inside a sandbox on each
 * worker (`command:`, or `npm:` — a server installed into the node sandbox image at build time).
 */
import { Type, type Static } from '@sinclair/typebox';

/** The separator between an upstream's id and its tool's name: `github__create_issue`. */
export const UPSTREAM_SEPARATOR = '__';
/** What every dialect accepts as a tool name (OpenAI and Anthropic share the rule). */
const NAME_CHARS = /[^a-zA-Z0-9_-]/g;
const NAME_MAX = 64;

/** Where build-images.sh installs the node image's MCP servers, and its launcher (run.mjs). */
export const NPM_SERVERS_DIR = '/opt/toolgate/mcp';
/** `<package>@<exact version>`, scoped or not: what the node image has, pinned. */
const NPM_SPEC =
  '^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*@\\d+\\.\\d+\\.\\d+([-+][0-9A-Za-z.-]+)?$';

export const UpstreamSchema = Type.Object(
  {
    id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' }),
    /** The server's Streamable HTTP endpoint, reached through policy.http's SSRF guard. */
    url: Type.Optional(Type.String({ pattern: '^https?://' })),
    /** A stdio server: this program and its arguments, run inside a sandbox (`image`). */
    command: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { minItems: 1 })),
    /**
     * A stdio server from the npm registry, `<package>@<exact version>`, installed into the
     * node image by scripts/sandbox/build-images.sh (SANDBOX_NPM_SERVERS); run with `args`.
     */
    npm: Type.Optional(Type.String({ pattern: NPM_SPEC })),
    /** Arguments after an `npm:` server's program (e.g. `stdio`, `/workspace`). */
    args: Type.Array(Type.String(), { default: [] }),
    /** The sandbox image (a key of sandbox.images) a stdio server runs in. */
    image: Type.String({ minLength: 1, default: 'node' }),
    /** A client whose workspace a stdio server gets at /workspace (read-write); none: empty. */
    workspace: Type.Optional(Type.String({ minLength: 1 })),
    /** A stdio server's network: through the egress filter (needs sandbox.allowNetwork). */
    allowNetwork: Type.Boolean({ default: false }),
    /** `lazy`: a stdio server starts on the first call or listing; `eager`: at worker start. */
    start: Type.Union([Type.Literal('lazy'), Type.Literal('eager')], { default: 'lazy' }),
    /** A stdio server with no call for this long is stopped (started again when needed); 0 = never. */
    idleSeconds: Type.Integer({ minimum: 0, maximum: 86_400, default: 300 }),
    /** Sent on every request; values may be `${ENV}` references (resolved at load). */
    headers: Type.Record(Type.String({ pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$" }), Type.String(), {
      default: {},
    }),
    refreshSeconds: Type.Integer({ minimum: 1, maximum: 86_400, default: 60 }),
    /**
     * `pin`: a tool is served only once an admin approved its definition's hash, and a changed
     * definition is quarantined until approved again. `auto`: changes are served at once (still
     * recorded and audited). docs/upstreams.md, "Trust and quarantine".
     */
    trust: Type.Union([Type.Literal('pin'), Type.Literal('auto')], { default: 'pin' }),
    /** Only these of the upstream's tools (its own names); absent: all of them. */
    tools: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { uniqueItems: true })),
    /** The upstream's tools (its own names, or `*`) that wait for a person's approval. */
    approval: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    cacheTtlSeconds: Type.Integer({ minimum: 0, default: 0 }),
    timeoutMs: Type.Integer({ minimum: 100, maximum: 600_000, default: 30_000 }),
    /** Calls in flight to this upstream, per worker. */
    concurrency: Type.Integer({ minimum: 1, maximum: 1024, default: 16 }),
    /**
     * Requests the upstream sends toolgate (roots/list, sampling, elicitation, ping), per
     * worker: at most `perCall` answered during one call, at most `perSession` replies
     * outstanding on the session at once; the rest are left unanswered (docs/upstreams.md).
     */
    serverRequests: Type.Object(
      {
        perCall: Type.Integer({ minimum: 0, maximum: 1024, default: 16 }),
        perSession: Type.Integer({ minimum: 0, maximum: 1024, default: 64 }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false },
);

export type UpstreamConfig = Static<typeof UpstreamSchema>;

/**
 * The toolgate name of upstream `id`'s tool `tool`: `<id>__<tool>`, every character the
 * dialects refuse as `_`, cut to 64. Two tools may come out the same: callers check.
 */
export function upstreamToolName(id: string, tool: string): string {
  return `${id}${UPSTREAM_SEPARATOR}${tool}`.replace(NAME_CHARS, '_').slice(0, NAME_MAX);
}

/** Whether the upstream is a stdio server (run in a sandbox on the workers). */
export function isStdioUpstream(u: Pick<UpstreamConfig, 'command' | 'npm'>): boolean {
  return u.command !== undefined || u.npm !== undefined;
}

/** The program a stdio upstream's sandbox runs. */
export function stdioArgv(u: Pick<UpstreamConfig, 'command' | 'npm' | 'args'>): string[] {
  if (u.command) return [...u.command];
  // The launcher checks the package is in the image at that version, then runs its program.
  return ['node', `${NPM_SERVERS_DIR}/run.mjs`, u.npm!, ...u.args];
}

/**
 * Cross-field problems of `upstreams:` (transport, duplicate ids, names that collide, and a
 * stdio server's image, workspace client and network against the rest of the config).
 */
export function upstreamProblems(
  upstreams: readonly UpstreamConfig[],
  context: {
    images?: readonly string[];
    clients?: readonly string[];
    allowNetwork?: boolean;
    /** The tool patterns of the config (clients[].tools, auth.oauth.scopes) and where each is. */
    patterns?: readonly { path: string; pattern: string }[];
  } = {},
): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = [];
  const ids = new Set<string>();
  const prefixes = new Map<string, string>();
  const names = new Map<string, string>();
  upstreams.forEach((u, i) => {
    const at = `/upstreams/${i}`;
    const transports = (['url', 'command', 'npm'] as const).filter((k) => u[k] !== undefined);
    if (transports.length === 0) {
      problems.push({
        path: `${at}/url`,
        message: `upstream "${u.id}" needs one of url, command or npm`,
      });
    } else if (transports.length > 1) {
      problems.push({
        path: `${at}/${transports[1]}`,
        message: `upstream "${u.id}" has ${transports.join(' and ')}: give one transport`,
      });
    } else if (isStdioUpstream(u)) {
      if (context.images && !context.images.includes(u.image))
        problems.push({
          path: `${at}/image`,
          message: `no sandbox image "${u.image}" (sandbox.images: ${context.images.join(', ')})`,
        });
      if (u.workspace !== undefined && context.clients && !context.clients.includes(u.workspace))
        problems.push({ path: `${at}/workspace`, message: `no client "${u.workspace}"` });
      if (u.allowNetwork && context.allowNetwork === false)
        problems.push({
          path: `${at}/allowNetwork`,
          message: 'a stdio server gets network only where sandbox.allowNetwork is true',
        });
      if (Object.keys(u.headers).length > 0)
        problems.push({ path: `${at}/headers`, message: 'headers are for url upstreams only' });
    }
    if (u.npm === undefined && u.args.length > 0)
      problems.push({
        path: `${at}/args`,
        message: 'args are for npm upstreams (a command carries its own)',
      });
    if (ids.has(u.id))
      problems.push({ path: `${at}/id`, message: `duplicate upstream id "${u.id}"` });
    ids.add(u.id);
    problems.push(...namingProblems(u.id, `${at}/id`, prefixes, context.patterns ?? []));
    for (const tool of u.tools ?? []) {
      const name = upstreamToolName(u.id, tool);
      const other = names.get(name);
      if (other !== undefined) {
        problems.push({
          path: `${at}/tools`,
          message: `"${u.id}" tool "${tool}" and ${other} both become the tool name "${name}"`,
        });
      } else names.set(name, `"${u.id}" tool "${tool}"`);
    }
  });
  return problems;
}

/**
 * An upstream's tools are named `<id>__<tool>`, and a tool pattern `<word>*` matches every name
 * that starts with `<word>` as plain text. So an id is refused where the names would not say
 * whose tool is whose: an id holding `__` or ending in `_` (`gh__admin`'s tools would match
 * `gh__*`, meant for upstream `gh`), two ids that name their tools alike (`a.b`, `a_b`), and an
 * id whose tools a configured pattern reaches without naming the upstream (`file_*`, meant for
 * `file_read` and `file_write`, would grant upstream `file`'s `file__delete_everything`).
 */
function namingProblems(
  id: string,
  path: string,
  prefixes: Map<string, string>,
  patterns: readonly { path: string; pattern: string }[],
): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = [];
  const word = id.replace(NAME_CHARS, '_');
  if (word.includes(UPSTREAM_SEPARATOR) || word.endsWith('_')) {
    problems.push({
      path,
      message: `upstream id "${id}" holds "${UPSTREAM_SEPARATOR}" or ends in "_"${word === id ? '' : ` (as "${word}" in tool names)`}: its tools' names (${word}${UPSTREAM_SEPARATOR}…) would read as another upstream's, and patterns for that one would grant them`,
    });
    return problems;
  }
  const prefix = upstreamToolName(id, '');
  const other = prefixes.get(prefix);
  if (other !== undefined) {
    problems.push({
      path,
      message: `upstreams "${other}" and "${id}" both name their tools "${prefix}…"`,
    });
  } else prefixes.set(prefix, id);
  for (const { path: at, pattern } of patterns) {
    if (!pattern.endsWith('*') || pattern.length < 2 || pattern.startsWith('category:')) continue;
    const start = pattern.slice(0, -1);
    if (prefix.startsWith(start) && start !== prefix) {
      problems.push({
        path,
        message: `upstream "${id}": the pattern "${pattern}" (${at}) would also grant all of its tools (${prefix}…), though it does not name the upstream; rename the upstream, or grant its tools with "${prefix}*"`,
      });
    }
  }
  return problems;
}

/**
 * `upstreams:` — MCP servers whose tools toolgate serves behind its own pipeline
 * (docs/upstreams.md). Slice 1 speaks Streamable HTTP only; `command:` and `npm:` are known
 * and refused with a config error until the stdio transport lands.
 */
import { Type, type Static } from '@sinclair/typebox';

/** The separator between an upstream's id and its tool's name: `github__create_issue`. */
export const UPSTREAM_SEPARATOR = '__';
/** What every dialect accepts as a tool name (OpenAI and Anthropic share the rule). */
const NAME_CHARS = /[^a-zA-Z0-9_-]/g;
const NAME_MAX = 64;

export const STDIO_NOT_SUPPORTED = 'stdio upstreams are not supported yet (issue 21, later slice)';

export const UpstreamSchema = Type.Object(
  {
    id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' }),
    /** The server's Streamable HTTP endpoint, reached through policy.http's SSRF guard. */
    url: Type.Optional(Type.String({ pattern: '^https?://' })),
    /** Recognised so the refusal can say why (a later slice runs them in sandboxes). */
    command: Type.Optional(Type.Unknown()),
    npm: Type.Optional(Type.Unknown()),
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

/** Cross-field problems of `upstreams:` (transport, duplicate ids, names that collide). */
export function upstreamProblems(
  upstreams: readonly UpstreamConfig[],
): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = [];
  const ids = new Set<string>();
  const names = new Map<string, string>();
  upstreams.forEach((u, i) => {
    const at = `/upstreams/${i}`;
    if (u.command !== undefined || u.npm !== undefined) {
      problems.push({
        path: `${at}/${u.command !== undefined ? 'command' : 'npm'}`,
        message: STDIO_NOT_SUPPORTED,
      });
    } else if (u.url === undefined) {
      problems.push({ path: `${at}/url`, message: `upstream "${u.id}" needs a url` });
    }
    if (ids.has(u.id))
      problems.push({ path: `${at}/id`, message: `duplicate upstream id "${u.id}"` });
    ids.add(u.id);
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

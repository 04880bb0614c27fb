/**
 * The two toolgate calls every tool loop makes: fetch the tool list in the model's dialect,
 * and hand the model's tool calls to the dialect bridge, which runs them (in parallel, through
 * validation, policy and sandboxes) and answers with the messages to append.
 */

export interface Toolgate {
  /** e.g. http://127.0.0.1:8080 */
  url: string;
  /** A client key from the toolgate config (or the development key printed at start). */
  key: string;
  /** Sent as X-Conversation-Id: toolgate's loop guard counts calls per conversation. */
  conversationId?: string;
}

export function toolgateFromEnv(env: Record<string, string | undefined> = process.env): Toolgate {
  const key = env.TOOLGATE_KEY;
  if (!key) {
    throw new Error(
      'set TOOLGATE_KEY to a toolgate API key (scripts/up.sh prints the development key)',
    );
  }
  return {
    url: (env.TOOLGATE_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, ''),
    key,
    conversationId: `example-${Date.now().toString(36)}`,
  };
}

export class ToolgateError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(`toolgate answered ${status} ${code}: ${message}`);
    this.name = 'ToolgateError';
    this.status = status;
    this.code = code;
  }
}

async function request<T>(tg: Toolgate, path: string, body?: unknown): Promise<T> {
  const res = await fetch(tg.url + path, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${tg.key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(tg.conversationId ? { 'x-conversation-id': tg.conversationId } : {}),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const payload = (await res.json().catch(() => ({}))) as {
    error?: { code: string; message: string };
  };
  if (!res.ok) {
    throw new ToolgateError(
      res.status,
      payload.error?.code ?? 'error',
      payload.error?.message ?? res.statusText,
    );
  }
  return payload as T;
}

/**
 * The client's tools in a model's dialect. With many tools, `q` ranks them for the task and
 * `limit` keeps the list short (or give the model find_tools).
 */
export function fetchTools<T>(
  tg: Toolgate,
  dialect: 'openai' | 'anthropic',
  options: { q?: string; limit?: number } = {},
): Promise<T[]> {
  const query = new URLSearchParams();
  if (options.q) query.set('q', options.q);
  if (options.limit) query.set('limit', String(options.limit));
  const qs = query.size ? `?${query}` : '';
  return request<T[]>(tg, `/tools/${dialect}${qs}`);
}

/**
 * POST /v1/tool-calls: what the model produced (an OpenAI assistant message, or Anthropic
 * content blocks) → `{messages}` to append to the conversation as they are. A failed tool is
 * an error the model reads in its slot, not an exception here.
 */
export function runToolCalls<M>(tg: Toolgate, modelOutput: unknown): Promise<{ messages: M[] }> {
  return request<{ messages: M[] }>(tg, '/v1/tool-calls', modelOutput);
}

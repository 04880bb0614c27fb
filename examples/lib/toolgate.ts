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

/** One event of `GET /v1/calls/{id}/events` (docs/long-running-calls.md). */
export type CallEvent =
  | { type: 'status'; status: string }
  | { type: 'output'; stream: 'stdout' | 'stderr'; text: string }
  | { type: 'progress'; progress: number; total?: number; message?: string }
  | {
      type: 'outcome';
      status: string;
      result?: unknown;
      error?: { code: string; message: string };
    };

/**
 * Starts a call without waiting for it (202). `idempotencyKey` `tool-call:<the model's call id>`
 * is the key the dialect bridge uses for that call: handing the model's message to
 * `runToolCalls` afterwards answers with this call's result instead of running it again.
 */
export async function startCall(
  tg: Toolgate,
  tool: string,
  args: unknown,
  idempotencyKey?: string,
): Promise<{ id: string; status: string }> {
  const res = await fetch(`${tg.url}/tools/${encodeURIComponent(tool)}/execute?wait=false`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${tg.key}`,
      'content-type': 'application/json',
      ...(tg.conversationId ? { 'x-conversation-id': tg.conversationId } : {}),
      ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
    },
    body: JSON.stringify(args),
  });
  const payload = (await res.json()) as {
    id: string;
    status: string;
    error?: { code: string; message: string };
  };
  if (!res.ok)
    throw new ToolgateError(
      res.status,
      payload.error?.code ?? 'error',
      payload.error?.message ?? '',
    );
  return payload;
}

/**
 * Follows a call's Server-Sent Events until its outcome (which it returns): live output and
 * progress go to `onEvent` as they come.
 */
export async function followCall(
  tg: Toolgate,
  id: string,
  onEvent: (event: CallEvent) => void,
): Promise<Extract<CallEvent, { type: 'outcome' }>> {
  const res = await fetch(`${tg.url}/v1/calls/${id}/events`, {
    headers: { authorization: `Bearer ${tg.key}`, accept: 'text/event-stream' },
  });
  if (!res.ok || !res.body) throw new ToolgateError(res.status, 'error', 'no event stream');
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const type = /^event: (.+)$/m.exec(block)?.[1];
      const data = /^data: (.+)$/m.exec(block)?.[1];
      if (!type || !data) continue; // a keep-alive comment
      const event = { type, ...(JSON.parse(data) as object) } as CallEvent;
      onEvent(event);
      if (event.type === 'outcome') return event;
    }
  }
  throw new Error(`the event stream of call ${id} ended without an outcome`);
}

/** Stops a call (toolgate kills its sandbox); a call that already ended is left as it is. */
export async function cancelCall(tg: Toolgate, id: string): Promise<void> {
  const res = await fetch(`${tg.url}/v1/calls/${id}/cancel`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tg.key}` },
  });
  if (!res.ok && res.status !== 409) {
    throw new ToolgateError(res.status, 'error', `could not cancel call ${id}`);
  }
}

/** What the loops do with long calls: print their output live, cancel them on a signal. */
export interface LiveCalls {
  onOutput?: (tool: string, stream: 'stdout' | 'stderr', text: string) => void;
  /** Aborting cancels the calls still running; the model reads that they were cancelled. */
  signal?: AbortSignal;
}

/**
 * Runs a turn's tool calls (in parallel) through `startCall` + `followCall` so their output
 * shows live and a signal cancels them, keyed as the bridge keys them: the `runToolCalls` that
 * follows formats their results for the model without running anything again.
 */
export async function runLive(
  tg: Toolgate,
  calls: { id: string; name: string; args: unknown }[],
  live: LiveCalls,
): Promise<void> {
  await Promise.all(
    calls.map(async (call) => {
      let started: { id: string; status: string };
      try {
        started = await startCall(tg, call.name, call.args, `tool-call:${call.id}`);
      } catch {
        return; // refused (bad arguments, unknown tool…): the bridge gives the model the error
      }
      // Parked for an administrator: the bridge tells the model so; nothing to follow now.
      if (started.status === 'pending_approval') return;
      const cancel = () => void cancelCall(tg, started.id).catch(() => undefined);
      live.signal?.addEventListener('abort', cancel, { once: true });
      if (live.signal?.aborted) cancel();
      try {
        await followCall(tg, started.id, (event) => {
          if (event.type === 'output') live.onOutput?.(call.name, event.stream, event.text);
        });
      } finally {
        live.signal?.removeEventListener('abort', cancel);
      }
    }),
  );
}

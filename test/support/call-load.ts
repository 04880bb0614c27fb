/**
 * A steady stream of calls against a gateway, for the Redis failover tests: synchronous
 * calculator calls and asynchronous (`?wait=false`) sleep calls from several loops at once,
 * each answer recorded with its time, so a test can tell when calls stopped and resumed and
 * check that every accepted call finished.
 */
export interface LoadAnswer {
  /** ms since the load started */
  at: number;
  kind: 'sync' | 'async';
  httpStatus: number;
  /** The call id, when the call was accepted (200 or 202). */
  id?: string;
  /** The error code of a refused call (e.g. `unavailable`), and its message. */
  code?: string;
  message?: string;
  retryAfter?: string | null;
}

export interface CallLoad {
  answers: LoadAnswer[];
  started: number;
  /** Stops the loops and waits for the calls in flight. */
  stop(): Promise<LoadAnswer[]>;
}

export function startCallLoad(
  baseUrl: string,
  key: string,
  options: { loops?: number; pauseMs?: number } = {},
): CallLoad {
  const answers: LoadAnswer[] = [];
  const started = Date.now();
  let running = true;
  let n = 0;
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const once = async (kind: 'sync' | 'async'): Promise<void> => {
    const i = n++;
    const url =
      kind === 'sync'
        ? `${baseUrl}/tools/calculator/execute`
        : `${baseUrl}/tools/sleep/execute?wait=false`;
    // Distinct arguments: no answer comes from the result cache.
    const body = kind === 'sync' ? { expression: `${i}+1` } : { ms: 20 + (i % 7) };
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(20_000),
      });
      const json = (await res.json().catch(() => ({}))) as {
        id?: string;
        status?: string;
        error?: { code?: string; message?: string };
      };
      answers.push({
        at: Date.now() - started,
        kind,
        httpStatus: res.status,
        ...(res.status === 200 || res.status === 202 ? { id: json.id } : {}),
        ...(json.error?.code ? { code: json.error.code } : {}),
        ...(json.error?.message && res.status >= 400 ? { message: json.error.message } : {}),
        retryAfter: res.headers.get('retry-after'),
      });
    } catch (err) {
      answers.push({ at: Date.now() - started, kind, httpStatus: 0, code: (err as Error).name });
    }
  };
  const loops = Array.from({ length: options.loops ?? 4 }, async (_, l) => {
    for (let i = 0; running; i++) {
      await once((i + l) % 3 === 0 ? 'async' : 'sync');
      await new Promise((r) => setTimeout(r, options.pauseMs ?? 10));
    }
  });
  return {
    answers,
    started,
    async stop() {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

/**
 * How long calls stopped around `fromMs` (a failover): the longest gap, after it, between one
 * accepted call and the next (or from `fromMs` to the first).
 */
export function longestStall(answers: LoadAnswer[], fromMs: number): number {
  const times = answers
    .filter((a) => a.id !== undefined && a.at >= fromMs)
    .map((a) => a.at)
    .sort((a, b) => a - b);
  let longest = 0;
  let previous = fromMs;
  for (const at of times) {
    longest = Math.max(longest, at - previous);
    previous = at;
  }
  return times.length === 0 ? Infinity : longest;
}

/** How an accepted call ended, as GET /v1/calls/{id} tells. */
export interface CallEnd {
  status: string;
  code?: string;
}

/** Polls each accepted call until it ends (`unfinished` after `timeoutMs`). */
export async function finalStatuses(
  baseUrl: string,
  key: string,
  ids: string[],
  timeoutMs = 30_000,
): Promise<Map<string, CallEnd>> {
  const result = new Map<string, CallEnd>();
  const deadline = Date.now() + timeoutMs;
  let pending = [...ids];
  while (pending.length > 0 && Date.now() < deadline) {
    const next: string[] = [];
    for (const id of pending) {
      const res = await fetch(`${baseUrl}/v1/calls/${id}`, {
        headers: { authorization: `Bearer ${key}` },
      }).catch(() => undefined);
      const body = res?.ok
        ? ((await res.json()) as { status: string; error?: { code: string } })
        : undefined;
      if (body && body.status !== 'queued' && body.status !== 'running')
        result.set(id, { status: body.status, ...(body.error ? { code: body.error.code } : {}) });
      else next.push(id);
    }
    pending = next;
    if (pending.length > 0) await new Promise((r) => setTimeout(r, 200));
  }
  for (const id of pending) result.set(id, { status: 'unfinished' });
  return result;
}

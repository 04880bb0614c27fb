/**
 * JSON from the authorization server (metadata, JWKS, introspection), read with a timeout and
 * a size cap: the server is configured by the operator, but a broken or hijacked one must not
 * hold a request or fill this process's memory.
 */
export class AuthServerError extends Error {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = 'AuthServerError';
  }
}

/** How long one request to the authorization server may take. */
export const AUTH_SERVER_TIMEOUT_MS = 5000;

export async function fetchJson(
  url: string,
  maxBytes: number,
  init: RequestInit = {},
): Promise<{ status: number; body: unknown }> {
  let res: Response;
  try {
    res = await fetch(url, {
      ...init,
      redirect: 'error',
      signal: AbortSignal.timeout(AUTH_SERVER_TIMEOUT_MS),
      headers: { accept: 'application/json', ...(init.headers as Record<string, string>) },
    });
  } catch (err) {
    throw new AuthServerError(`${url}: ${(err as Error).message}`, { cause: err });
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = res.body?.getReader();
  try {
    for (;;) {
      if (!reader) break;
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) {
        await reader.cancel();
        throw new AuthServerError(`${url}: answer larger than ${maxBytes} bytes`);
      }
      chunks.push(value);
    }
  } catch (err) {
    if (err instanceof AuthServerError) throw err;
    throw new AuthServerError(`${url}: ${(err as Error).message}`, { cause: err });
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
  } catch (err) {
    throw new AuthServerError(`${url}: answer (HTTP ${res.status}) is not JSON`, { cause: err });
  }
}

/**
 * The worker's end of one script's channel: frames of a 4-byte big-endian length and JSON,
 * request then reply, per connection in order. Requests are `{"op":"call","tool","args",
 * "idempotencyKey?"}` and
 * `{"op":"help","name"}`; replies `{"ok":true,"result"}` or `{"ok":false,"error","callId?"}`.
 * Bounded: a request's size, the connections open at once, and the bytes of results the
 * script receives in all.
 */
import type { Socket } from 'node:net';
import type { CodeModeSession, NestedOutcome } from './services.js';

/** A request frame over this closes the connection (after an error reply): 1 MiB. */
export const MAX_REQUEST_BYTES = 1024 * 1024;
/** Connections one script may hold open at once (one per Python thread). */
export const MAX_CONNECTIONS = 8;

type Reply =
  | { ok: true; result: unknown }
  | { ok: false; error: { code: string; message: string; details?: unknown }; callId?: string };

export class ScriptChannel {
  /** Bytes of ok replies sent so far (what the script received). */
  bytesReturned = 0;
  /** Nested calls made (answered or not). */
  calls = 0;
  private connections = 0;
  /** Aborted when the script ends, however it ends: its nested calls still out are cancelled. */
  private readonly ended = new AbortController();
  private readonly signal: AbortSignal;

  constructor(
    private readonly session: CodeModeSession,
    private readonly maxResultBytes: number,
    callSignal: AbortSignal,
  ) {
    this.signal = AbortSignal.any([callSignal, this.ended.signal]);
  }

  /**
   * The script ended (exit, its own timeout, a kill): nested calls still waiting — parked for
   * approval, queued, running — are hung up on, which cancels them on the gateway.
   */
  close(): void {
    this.ended.abort();
  }

  /** Serves one connection of the sandbox's socket. */
  handle = (socket: Socket): void => {
    if (++this.connections > MAX_CONNECTIONS) {
      this.connections--;
      socket.destroy();
      return;
    }
    socket.once('close', () => this.connections--);
    socket.on('error', () => undefined);
    let buffered: Buffer = Buffer.alloc(0);
    let busy = false;
    const pump = async (): Promise<void> => {
      if (busy) return;
      busy = true;
      try {
        while (buffered.length >= 4 && !socket.destroyed) {
          const size = buffered.readUInt32BE(0);
          if (size > MAX_REQUEST_BYTES) {
            await this.send(socket, {
              ok: false,
              error: {
                code: 'request_too_large',
                message: `a nested call's request is at most ${MAX_REQUEST_BYTES} bytes of JSON (this one: ${size})`,
              },
            });
            // Whatever else it sends is not read: the connection ends here.
            socket.destroy();
            return;
          }
          if (buffered.length < 4 + size) break;
          const frame = buffered.subarray(4, 4 + size);
          buffered = buffered.subarray(4 + size);
          // Held while the call runs: one request at a time per connection.
          socket.pause();
          const reply = await this.answer(frame);
          await this.send(socket, reply);
          socket.resume();
        }
      } finally {
        busy = false;
      }
    };
    socket.on('data', (chunk: Buffer) => {
      buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
      // A frame's bytes are held until it is whole: never more than one request's worth.
      if (buffered.length > MAX_REQUEST_BYTES + 4 && buffered.readUInt32BE(0) > MAX_REQUEST_BYTES) {
        buffered = buffered.subarray(0, 4);
      }
      void pump();
    });
  };

  private async answer(frame: Buffer): Promise<Reply> {
    let request: {
      op?: unknown;
      tool?: unknown;
      name?: unknown;
      args?: unknown;
      idempotencyKey?: unknown;
    };
    try {
      request = JSON.parse(frame.toString('utf8')) as typeof request;
      if (typeof request !== 'object' || request === null) throw new Error('not an object');
    } catch {
      return { ok: false, error: { code: 'invalid_json', message: 'the request is not JSON' } };
    }
    if (request.op === 'help') {
      const tool = this.session.tools.find((t) => t.name === request.name);
      if (!tool)
        return {
          ok: false,
          error: { code: 'unknown_tool', message: `no tool named "${String(request.name)}" here` },
        };
      return {
        ok: true,
        result: { name: tool.name, description: tool.description, parameters: tool.parameters },
      };
    }
    if (request.op !== 'call' || typeof request.tool !== 'string') {
      return {
        ok: false,
        error: { code: 'invalid_request', message: 'expected {"op":"call","tool","args"}' },
      };
    }
    const key = request.idempotencyKey;
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > 255))
      return {
        ok: false,
        error: { code: 'invalid_request', message: 'an idempotency key is 1 to 255 characters' },
      };
    this.calls++;
    const outcome = await this.session.call(
      request.tool,
      request.args ?? {},
      this.signal,
      key as string | undefined,
    );
    return toReply(outcome);
  }

  private send(socket: Socket, reply: Reply): Promise<void> {
    let body = Buffer.from(JSON.stringify(reply));
    if (reply.ok) {
      if (this.bytesReturned + body.length > this.maxResultBytes) {
        body = Buffer.from(
          JSON.stringify({
            ok: false,
            error: {
              code: 'code_mode_bytes',
              message: `this result (${body.length} bytes) would take the script past the ${this.maxResultBytes} bytes of results it may receive (codeMode.maxResultBytes)`,
            },
          } satisfies Reply),
        );
      } else this.bytesReturned += body.length;
    }
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length, 0);
    return new Promise((resolve) => {
      if (socket.destroyed) return resolve();
      socket.write(Buffer.concat([head, body]), () => resolve());
    });
  }
}

function toReply(outcome: NestedOutcome): Reply {
  if (outcome.status === 'ok') return { ok: true, result: outcome.result ?? null };
  return {
    ok: false,
    error: outcome.error ?? { code: outcome.status, message: `the call ended ${outcome.status}` },
    ...(outcome.id ? { callId: outcome.id } : {}),
  };
}

/**
 * A worker's sessions (docs/sessions.md): opens a session's sandbox at its first call, runs
 * its calls in it, ends it when idle, past its lifetime or deleted, beats as a session host,
 * and reaps what lost hosts left.
 */
import { randomBytes } from 'node:crypto';
import type { CallJob, RedisClient, SessionRecord, SessionStore } from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import { ToolError, type Tool, type ToolContext, type ToolServices } from '@toolgate/registry';
import { ATTACHMENT_LIMITS } from '@toolgate/tools';
import { kernelArgv } from './kernels.js';
import { Session } from './session.js';

/** How long a session's kernel may take to start (a cold docker container: ~1 s). */
const OPEN_TIMEOUT_MS = 60_000;
const SWEEP_EVERY_MS = 1000;
/** How often each session's memory is read (a cgroup file) and recorded for GET /v1/sessions. */
const MEMORY_EVERY_MS = 10_000;

export interface SessionHostOptions {
  workerId: string;
  config: Config;
  store: SessionStore;
  services: ToolServices;
  /** A connection of its own for the kill channel. */
  subscriber: RedisClient;
  killChannel: string;
  log: Logger;
}

export class SessionHost {
  private readonly sessions = new Map<string, Session>();
  /** Each session's calls, one after another (opening included). */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** Lifetime ends of the sessions here, by id. */
  private readonly endsAt = new Map<string, number>();
  private readonly timers: NodeJS.Timeout[] = [];
  private closed = false;
  private readonly log: Logger;

  constructor(private readonly o: SessionHostOptions) {
    this.log = o.log.child({ component: 'sessions' });
    // Attached before the subscribe's await: no kill is missed once it is listening.
    o.subscriber.on('message', (channel: string, message: string) => {
      if (channel !== o.killChannel) return;
      let id: unknown;
      try {
        ({ id } = JSON.parse(message) as { id?: unknown });
      } catch {
        return;
      }
      if (typeof id === 'string' && this.sessions.has(id)) {
        this.log.info({ session: id }, 'session deleted: killing its sandbox');
        void this.end(id, 'deleted');
      }
    });
  }

  get count(): number {
    return this.sessions.size;
  }

  async start(): Promise<void> {
    const { store, workerId, config } = this.o;
    await this.o.subscriber.subscribe(this.o.killChannel);
    await store.beat(workerId);
    this.timers.push(
      setInterval(
        () => void store.beat(workerId).catch(() => undefined),
        Math.max(100, Math.round(store.aliveMs / 3)),
      ),
      setInterval(() => this.sweep(), SWEEP_EVERY_MS),
      setInterval(() => void this.recordMemory(), MEMORY_EVERY_MS),
      setInterval(
        () => void this.reapLost(),
        Math.max(250, Math.round(config.worker.lostCallTimeoutMs / 4)),
      ),
    );
  }

  /** Kills every session here; from now on their calls answer `session_lost`. */
  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.timers) clearInterval(timer);
    await this.o.store.leave(this.o.workerId).catch(() => undefined);
    await Promise.all([...this.sessions.values()].map((s) => s.kill()));
    this.o.subscriber.disconnect();
  }

  /** The tool as this call runs it: in its session's sandbox, after the session's earlier calls. */
  bind(tool: Tool, job: CallJob): Tool {
    const id = job.session!.id;
    return {
      ...tool,
      handler: (args: Record<string, unknown>, ctx: ToolContext) => {
        const previous = this.chains.get(id) ?? Promise.resolve();
        const call = previous.then(() => this.callIn(id, job, args, ctx));
        const settled = call.catch(() => undefined);
        this.chains.set(id, settled);
        void settled.then(() => {
          if (this.chains.get(id) === settled) this.chains.delete(id);
        });
        return call;
      },
    } as Tool;
  }

  private async callIn(
    id: string,
    job: CallJob,
    args: Record<string, unknown>,
    ctx: ToolContext,
  ): Promise<unknown> {
    const { store, config } = this.o;
    const idleMs = config.sessions.idleSeconds * 1000;
    let session = this.sessions.get(id);
    const owner = { id, clientId: job.clientId };
    if (session) {
      if ((await store.touch(owner, idleMs)) === 0) {
        await this.end(id, 'gone');
        throw notFound(id);
      }
    } else {
      const record = await store.get(id);
      if (!record || record.clientId !== job.clientId) throw notFound(id);
      if (record.tool !== job.tool) {
        throw new ToolError(
          'invalid_request',
          `session ${id} runs ${record.tool}, not ${job.tool}`,
        );
      }
      if (record.workerId !== this.o.workerId || record.opened || record.lost || this.closed) {
        // Its sandbox ended here earlier (a memory kill, its kernel's exit) or lives elsewhere.
        await store.remove(id).catch(() => undefined);
        throw new ToolError(
          'session_lost',
          `session ${id} is gone: its sandbox ended; start a new session`,
        );
      }
      session = await this.open(record, ctx.signal);
      await store.touch(record, idleMs, true);
      const { memoryBytes } = await session.stats();
      if (memoryBytes !== undefined) await store.setMemory(id, memoryBytes);
    }
    const code = String(job.tool === 'run_python' ? args.code : args.command);
    const timeout = typeof args.timeoutSeconds === 'number' ? args.timeoutSeconds : undefined;
    try {
      return await session.run(code, timeout, ctx);
    } finally {
      await store.touch(owner, idleMs).catch(() => undefined);
    }
  }

  private async open(record: SessionRecord, signal: AbortSignal): Promise<Session> {
    const { sandbox, workspaces } = this.o.services as Partial<ToolServices>;
    if (!sandbox || !workspaces) {
      throw new ToolError('sandbox_error', 'this worker has no sandbox configured');
    }
    const token = randomBytes(12).toString('hex');
    const workspace = await workspaces.ensure(record.clientId);
    const process = await sandbox.open({
      image: record.tool === 'run_python' ? 'python' : 'shell',
      argv: kernelArgv(record.tool, token, ATTACHMENT_LIMITS),
      workspace,
      label: `session-${record.id}`,
      clientId: record.clientId,
    });
    const session = new Session(record.id, record.tool, record.clientId, process, token, {
      outputBytes: sandbox.config.limits.outputBytes,
      interruptGraceMs: this.o.config.sessions.interruptGraceMs,
      memoryMb: sandbox.config.limits.memoryMb,
      attachments: ATTACHMENT_LIMITS,
    });
    this.sessions.set(record.id, session);
    this.endsAt.set(record.id, record.endsAt);
    void process.exited.then((exit) => {
      if (this.sessions.get(record.id) === session) {
        this.sessions.delete(record.id);
        this.endsAt.delete(record.id);
        this.log.info({ session: record.id, ...exit }, 'session sandbox ended');
      }
    });
    const timeout = AbortSignal.any([signal, AbortSignal.timeout(OPEN_TIMEOUT_MS)]);
    try {
      await Promise.race([
        session.ready(),
        new Promise<never>((_, reject) =>
          timeout.addEventListener(
            'abort',
            () => reject(new ToolError('session_lost', 'the session did not start in time')),
            { once: true },
          ),
        ),
      ]);
    } catch (err) {
      await session.kill();
      throw err;
    }
    this.log.info({ session: record.id, tool: record.tool }, 'session started');
    return session;
  }

  /** Kills a session here; unless deleted already, removes its record too. */
  private async end(id: string, why: 'idle' | 'lifetime' | 'deleted' | 'gone'): Promise<void> {
    const session = this.sessions.get(id);
    this.sessions.delete(id);
    this.endsAt.delete(id);
    if (why === 'idle' || why === 'lifetime') {
      this.log.info({ session: id, why }, 'session ended');
      await this.o.store.remove(id).catch(() => undefined);
    }
    await session?.kill();
  }

  /** Ends sessions idle past sessions.idleSeconds or older than their lifetime. */
  private sweep(): void {
    const now = Date.now();
    const idleMs = this.o.config.sessions.idleSeconds * 1000;
    for (const [id, session] of this.sessions) {
      if (now >= (this.endsAt.get(id) ?? Infinity)) void this.end(id, 'lifetime');
      else if (!session.busy && now - session.lastUsedAt >= idleMs) void this.end(id, 'idle');
    }
  }

  private async recordMemory(): Promise<void> {
    for (const [id, session] of this.sessions) {
      const { memoryBytes } = await session.stats().catch(() => ({ memoryBytes: undefined }));
      if (memoryBytes !== undefined)
        await this.o.store.setMemory(id, memoryBytes).catch(() => undefined);
    }
  }

  /** Hosts whose beat stopped: their queued calls end `session_lost`, their sessions lost. */
  private async reapLost(): Promise<void> {
    try {
      for (const host of await this.o.store.lostHosts()) {
        if (host === this.o.workerId) continue;
        const calls = await this.o.store.reapHost(host);
        this.log.warn({ host, calls }, 'session host lost: its sessions are gone');
      }
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'could not reap lost session hosts');
    }
  }
}

function notFound(id: string): ToolError {
  return new ToolError(
    'session_not_found',
    `no session ${id}: it expired or was deleted; start a new session`,
  );
}

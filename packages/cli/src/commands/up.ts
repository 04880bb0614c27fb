/**
 * `toolgate up`: the local stack (what scripts/up.sh starts after installing what is missing):
 * Redis unless one is given, the sandbox images unless TOOLGATE_SANDBOX=off, then a worker and
 * a gateway as child processes, their logs readable on a terminal. Ctrl-C stops all of them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { colours, type CliIo, type Command } from '../command.js';
import { consoleBuildState, stampConsoleBuild } from '../console-build.js';
import { formatLogLine } from '../pretty-log.js';

/** The checkout's root (scripts/, plugins/, deploy/sandbox/); absent in the images. */
const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const SCRIPTS = path.join(REPO_ROOT, 'scripts', 'sandbox');
const CONSOLE = path.join(REPO_ROOT, 'console');
const STOP_GRACE_MS = 60_000;

/** Whether something answers PING with +PONG on 127.0.0.1:port. */
function redisAnswers(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (b) => done(b.toString().startsWith('+PONG')));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

interface Output {
  /** A line from `service` (its stdout or stderr). */
  line(service: string, line: string): void;
  /** toolgate up's own message. */
  note(msg: string, level?: 'info' | 'warn' | 'error'): void;
}

const LEVEL = { info: 30, warn: 40, error: 50 } as const;

/** Pretty lines on a terminal; JSON lines otherwise (a non-JSON line is wrapped as one). */
function output(io: CliIo, json: boolean): Output {
  const c = colours(io);
  const paint: Record<string, (t: string) => string> = {
    gateway: c.cyan,
    worker: c.magenta,
    redis: c.red,
    images: c.blue,
    console: c.green,
    up: c.bold,
  };
  const record = (service: string, msg: string, level = 30) =>
    JSON.stringify({ level, time: Date.now(), name: `toolgate-${service}`, msg });
  return {
    line(service, line) {
      if (json) io.out(`${line.startsWith('{') ? line : record(service, line)}\n`);
      else io.out(`${formatLogLine(service, paint[service] ?? c.bold, line, c)}\n`);
    },
    note(msg, level = 'info') {
      this.line('up', record('up', msg, LEVEL[level]));
    },
  };
}

function pipeLines(child: ChildProcess, service: string, out: Output): void {
  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    createInterface({ input: stream, crlfDelay: Infinity }).on('line', (l) => {
      if (l.trim() !== '') out.line(service, l);
    });
  }
}

/** Runs a command to completion with its output as `service` lines; resolves with its exit code. */
function run(cmd: string, args: string[], service: string, out: Output, env: NodeJS.ProcessEnv) {
  const child = spawn(cmd, args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  pipeLines(child, service, out);
  return new Promise<number>((resolve) => {
    child.once('error', () => resolve(127));
    child.once('exit', (code) => resolve(code ?? 1));
  });
}

/**
 * Builds the checkout's console unless console/dist holds a build of its current sources (the
 * gateway answers /console/ with 503 without one). A failed build is reported, not fatal: the
 * API works without the console. Skipped where the files come from elsewhere
 * (TOOLGATE_CONSOLE_DIR) or there are no sources (an installed image ships the built files).
 */
async function ensureConsole(out: Output, env: NodeJS.ProcessEnv): Promise<void> {
  if (env.TOOLGATE_CONSOLE_DIR) {
    out.note(`console: serving ${env.TOOLGATE_CONSOLE_DIR} (TOOLGATE_CONSOLE_DIR), not building`);
    return;
  }
  if (!existsSync(path.join(CONSOLE, 'package.json'))) return;
  const { state, hash } = await consoleBuildState(CONSOLE);
  if (state === 'current') {
    out.note('console: console/dist is current');
    return;
  }
  out.note(
    state === 'missing'
      ? 'console: not built yet; building console/dist (pnpm --filter @toolgate/console build)'
      : 'console: console/ changed since the last build; rebuilding console/dist',
  );
  const code = await run('pnpm', ['--filter', '@toolgate/console', 'build'], 'console', out, env);
  if (code === 0) {
    await stampConsoleBuild(CONSOLE, hash);
    return;
  }
  out.note(
    code === 127
      ? 'console: pnpm is not on PATH (scripts/up.sh installs it); /console/ answers 503 until `pnpm --filter @toolgate/console build` runs'
      : `console: the build failed (exit ${code}); /console/ answers 503 (or the previous build) until it builds`,
    'error',
  );
}

/** SIGTERM, then SIGKILL after the grace time; resolves once the process has exited. */
function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined)
    return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
  return exited.finally(() => clearTimeout(timer));
}

export const upCommand: Command = {
  name: 'up',
  summary: 'run the local stack: Redis, sandbox images, a worker and a gateway',
  help: `usage: toolgate up [--config <file>] [--json]

  Starts what a local toolgate needs, in order, and stops all of it on Ctrl-C:
   1. Redis: uses $REDIS_URL when set; else the Redis answering on 127.0.0.1:$TOOLGATE_REDIS_PORT
      (default 6379), else starts redis-server there (no persistence; stopped on exit).
   2. Sandbox images (scripts/sandbox/ensure-docker.sh, build-images.sh; seconds when current),
      unless TOOLGATE_SANDBOX=off.
   3. The operator console (console/dist, served at /console/): built when missing, rebuilt
      when console/ or the lockfile changed since the last build (a hash stamped in dist/);
      a failed build is reported and the stack starts without it. Not with
      TOOLGATE_CONSOLE_DIR (built files given).
   4. \`toolgate worker\` and \`toolgate gateway\` as child processes, from the repository root.
  On a terminal their logs are readable lines (time, service, level, message, fields);
  with --json, or when stdout is not a terminal, the services' JSON lines as they are (lines
  that are not JSON, such as the development banner, wrapped as JSON records).
  scripts/up.sh (\`pnpm dev\`) installs Node, pnpm, the packages and redis-server first, then
  runs this.

  --config <file>  the config file for both services (default: $TOOLGATE_CONFIG)
  --json           JSON lines even on a terminal

Env: REDIS_URL, TOOLGATE_REDIS_PORT, TOOLGATE_SANDBOX=off, TOOLGATE_CONSOLE_DIR, and every
service variable (PORT, TOOLGATE_WORKER_QUEUES, ...). Exit codes: 130 after Ctrl-C (or SIGTERM), 1 when a
step or a service fails (the others are stopped), 2 bad usage.
`,
  options: { config: { type: 'string', short: 'c' }, json: { type: 'boolean', default: false } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const out = output(io, parsed.values.json === true || !io.isTTY);
    const env: NodeJS.ProcessEnv = { ...io.env };
    if (typeof parsed.values.config === 'string')
      env.TOOLGATE_CONFIG = path.resolve(io.cwd, parsed.values.config);
    const children: { name: string; child: ChildProcess }[] = [];
    let stopping: Promise<number> | undefined;
    let resolveStopped: (code: number) => void = () => undefined;
    const stopped = new Promise<number>((resolve) => (resolveStopped = resolve));

    // Services first (they finish their calls, then let go of Redis), Redis last. Each child
    // has its own process group, so a terminal's Ctrl-C reaches only us and each service gets
    // exactly one SIGTERM (a second one would make it skip its drain).
    const stop = (code: number): Promise<number> =>
      (stopping ??= (async () => {
        for (const redis of [false, true]) {
          const group = children.filter((c) => (c.name === 'redis') === redis);
          await Promise.all(group.map(({ child }) => terminate(child)));
        }
        resolveStopped(code);
        return code;
      })());
    const onSignal = () => {
      out.note('stopping: the services finish in-flight calls first');
      void stop(130);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    const start = (name: string, cmd: string, args: string[], cwd: string) => {
      const child = spawn(cmd, args, {
        cwd,
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push({ name, child });
      pipeLines(child, name, out);
      child.once('error', (err) => {
        out.note(`cannot start ${name}: ${err.message}`, 'error');
        void stop(1);
      });
      child.once('exit', (code, signal) => {
        if (stopping) return;
        out.note(`${name} exited (${code ?? signal}); stopping the others`, 'error');
        void stop(1);
      });
      return child;
    };

    try {
      if (!env.REDIS_URL) {
        const port = Number(env.TOOLGATE_REDIS_PORT || 6379);
        if (await redisAnswers(port)) {
          out.note(`using the Redis already answering on 127.0.0.1:${port}`);
        } else {
          out.note(`starting redis-server on 127.0.0.1:${port}`);
          start(
            'redis',
            'redis-server',
            [
              '--port',
              String(port),
              '--bind',
              '127.0.0.1',
              '--save',
              '',
              '--appendonly',
              'no',
              '--loglevel',
              'warning',
            ],
            io.cwd,
          );
          for (let i = 0; i < 50 && !stopping && !(await redisAnswers(port)); i++)
            await new Promise((r) => setTimeout(r, 100));
          if (!stopping && !(await redisAnswers(port))) {
            out.note(
              `redis-server does not answer on ${port} (install it, or set REDIS_URL)`,
              'error',
            );
            return await stop(1);
          }
        }
        env.REDIS_URL = `redis://127.0.0.1:${port}`;
      }
      if (stopping) return await stopping;

      if (env.TOOLGATE_SANDBOX !== 'off') {
        if (existsSync(path.join(SCRIPTS, 'build-images.sh'))) {
          for (const script of ['ensure-docker.sh', 'build-images.sh']) {
            const code = await run('bash', [path.join(SCRIPTS, script)], 'images', out, env);
            if (stopping) return await stopping;
            if (code !== 0) {
              out.note(
                `scripts/sandbox/${script} failed (exit ${code}); TOOLGATE_SANDBOX=off runs without sandboxed tools`,
                'error',
              );
              return await stop(1);
            }
          }
        } else {
          out.note(
            'no scripts/sandbox here: the sandbox images are built on the host (scripts/sandbox/build-images.sh)',
            'warn',
          );
        }
      }

      await ensureConsole(out, env);
      if (stopping) return await stopping;

      // The same bin, with the same node flags (source conditions and tsx in a checkout).
      const cwd = existsSync(path.join(REPO_ROOT, 'package.json')) ? REPO_ROOT : io.cwd;
      const bin = [...process.execArgv, process.argv[1]!];
      start('worker', process.execPath, [...bin, 'worker'], cwd);
      start('gateway', process.execPath, [...bin, 'gateway'], cwd);
      return await stopped;
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  },
};

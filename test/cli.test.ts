/**
 * The `toolgate` command as a user runs it: the real bin as a child process, against the run's
 * Redis, extra redis-servers, the Docker engine, and real gateways and workers.
 */
import { execFile, execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  ROOT,
  TOOLGATE_BIN,
  startToolgate,
  startToolgateIn,
  type Service,
} from './support/process.js';
import { COMMANDS, runCli } from '@toolgate/cli';
import { freePort, startRedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'tg-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** `toolgate <args…>` to completion, from `dir` (INIT_CWD), with only the env given. */
function toolgate(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [TOOLGATE_BIN, ...args],
      {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          HOME: process.env.HOME ?? '/tmp',
          INIT_CWD: dir,
          ...env,
        },
        timeout: 60_000,
      },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });
}

async function configFile(name: string, doc: unknown): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, JSON.stringify(doc, null, 2));
  return file;
}

interface Check {
  name: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  fix?: string;
}

async function doctor(args: string[], env: Record<string, string>) {
  const run = await toolgate(['doctor', '--json', ...args], env);
  const checks = JSON.parse(run.stdout) as Check[];
  return { ...run, checks, check: (name: string) => checks.find((c) => c.name === name) };
}

describe('toolgate: help and usage', () => {
  it('lists every command, and each has --help', async () => {
    // The bin itself, once; each command's help in process (a bin start each took 2–3 s).
    const top = await toolgate(['--help']);
    expect(top.code).toBe(0);
    expect(COMMANDS.length).toBeGreaterThanOrEqual(16);
    for (const { name } of COMMANDS) {
      expect(top.stdout).toContain(`  ${name} `);
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli([...name.split(' '), '--help'], {
        cwd: process.cwd(),
        env: {},
        out: (t) => out.push(t),
        err: (t) => err.push(t),
        isTTY: false,
      });
      expect({ code, stderr: err.join('') }, name).toEqual({ code: 0, stderr: '' });
      expect(out.join('')).toContain(`usage: toolgate ${name}`);
      expect(out.join(''), name).toMatch(/Exit codes/);
    }
  });

  it('refuses unknown commands and flags with a message and exit 2', async () => {
    const unknown = await toolgate(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
    const flag = await toolgate(['keys', 'new', '--bogus']);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("Unknown option '--bogus'");
    const missing = await toolgate(['config', 'check']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('usage: toolgate config check <file>');
  });
});

describe('toolgate keys new', () => {
  it('prints a key whose sha256 is the keySha256 line, and the config accepts it', async () => {
    const run = await toolgate(['keys', 'new', '--client', 'ci-bot']);
    expect(run.code).toBe(0);
    const key = /^key: (tg_[A-Za-z0-9_-]{43})$/m.exec(run.stdout)?.[1];
    const hash = /^ {4}keySha256: ([0-9a-f]{64})$/m.exec(run.stdout)?.[1];
    expect(run.stdout).toMatch(/^ {2}- id: ci-bot$/m);
    expect(key).toBeDefined();
    expect(hash).toBe(createHash('sha256').update(key!).digest('hex'));

    const again = await toolgate(['keys', 'new', '--json']);
    const json = JSON.parse(again.stdout) as { client: string; key: string; keySha256: string };
    expect(json.key).not.toBe(key);
    expect(json.keySha256).toBe(createHash('sha256').update(json.key).digest('hex'));

    const bad = await toolgate(['keys', 'new', '--client', 'no spaces']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('not a valid client id');
  });

  it('the printed lines admit the key at a real gateway', async () => {
    const run = await toolgate(['keys', 'new', '--client', 'newbie']);
    const key = /^key: (\S+)$/m.exec(run.stdout)![1]!;
    const hash = /keySha256: (\S+)$/m.exec(run.stdout)![1]!;
    const stack = await startStack({
      config: { clients: [{ id: 'newbie', keySha256: hash, tools: ['*'] }] },
    });
    try {
      const listed = await toolgate(['tools', '--json'], {
        TOOLGATE_URL: stack.url,
        TOOLGATE_KEY: key,
      });
      expect(listed.code).toBe(0);
      expect((JSON.parse(listed.stdout) as { name: string }[]).map((t) => t.name)).toContain(
        'calculator',
      );
    } finally {
      await stack.close();
    }
  });
});

describe('toolgate config check', () => {
  it('a good file: exit 0 and a summary', async () => {
    const file = await configFile('good.json', {
      clients: [
        { id: 'alice', keySha256: 'a'.repeat(64) },
        { id: 'ops', key: '${OPS_KEY}', admin: true },
      ],
      worker: { queues: ['fast'] },
    });
    const run = await toolgate(['config', 'check', 'good.json'], { OPS_KEY: 'x'.repeat(32) });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toContain(`${file}: OK`);
    expect(run.stdout).toContain('clients:  alice, ops (admin)');
  });

  it('a broken file: every problem with its path, exit 1', async () => {
    await writeFile(
      path.join(dir, 'broken.yaml'),
      [
        'server:',
        '  port: 99999',
        '  colour: blue',
        'redis:',
        '  url: ${NOT_SET_REDIS_URL}',
        'clients:',
        '  - id: alice',
        '    key: short',
        '  - id: bob',
        '  - id: alice',
        '    keySha256: "' + 'b'.repeat(64) + '"',
        'worker:',
        '  queues: [fast, slow]',
        'log:',
        '  level: loud',
        '',
      ].join('\n'),
    );
    const run = await toolgate(['config', 'check', 'broken.yaml']);
    expect(run.code).toBe(1);
    const lines = run.stderr.split('\n').map((l) => l.trim());
    for (const expected of [
      '/redis/url: environment variable NOT_SET_REDIS_URL is not set',
      '/server/port: must be <= 65535',
      '/server/colour: is not a known field',
      '/clients/0/key: must NOT have fewer than 16 characters',
      '/clients/1: client "bob" needs exactly one of key or keySha256 (or auth.oauth, for a client signing in with tokens only)',
      '/clients/2/id: duplicate client id "alice"',
      '/worker/queues/1: must be one of "fast", "sandbox"',
      '/log/level: must be one of "fatal", "error", "warn", "info", "debug", "trace", "silent"',
    ]) {
      expect(lines).toContain(expected);
    }
    expect(run.stderr).toContain('8 problems');
  });

  it('unreadable or unparsable files: exit 1 with the reason', async () => {
    const missing = await toolgate(['config', 'check', 'nope.yaml']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('cannot read');
    await writeFile(path.join(dir, 'garbage.yaml'), 'server: [1, 2\n');
    const garbage = await toolgate(['config', 'check', 'garbage.yaml']);
    expect(garbage.code).toBe(1);
    expect(garbage.stderr).toContain('is not valid YAML/JSON');
  });
});

describe('toolgate doctor', () => {
  it('passes the Redis checks against the test Redis', async () => {
    const file = await configFile('fast-only.json', { worker: { queues: ['fast'] } });
    const run = await doctor(['--config', file], { REDIS_URL: inject('redisUrl') });
    expect(run.check('redis version')?.status).toBe('ok');
    expect(run.check('redis eviction')).toMatchObject({
      status: 'ok',
      detail: 'maxmemory-policy noeviction',
    });
    // The test Redis runs without persistence, and says so.
    expect(run.check('redis persistence')?.status).toBe('warn');
    expect(run.check('sandbox')?.status).toBe('skip');
    expect(run.code).toBe(0);

    const text = await toolgate(['doctor', '--config', file], { REDIS_URL: inject('redisUrl') });
    expect(text.stdout).toMatch(/^✓ redis eviction +maxmemory-policy noeviction$/m);
    expect(text.stdout).toMatch(/^! redis persistence .*\n +fix: .*appendonly yes/m);
  });

  it('fails a Redis that evicts keys, and one that does not answer', async () => {
    const lru = await startRedisServer(undefined, ['--maxmemory-policy', 'allkeys-lru']);
    try {
      const file = await configFile('lru.json', { worker: { queues: ['fast'] } });
      const run = await doctor(['--config', file], { REDIS_URL: lru.url });
      expect(run.code).toBe(1);
      expect(run.check('redis eviction')).toMatchObject({ status: 'fail' });
      expect(run.check('redis eviction')!.detail).toContain('allkeys-lru');
      expect(run.check('redis eviction')!.fix).toContain('noeviction');
      const text = await toolgate(['doctor', '--config', file], { REDIS_URL: lru.url });
      expect(text.stdout).toMatch(/^✗ redis eviction +maxmemory-policy is allkeys-lru/m);
    } finally {
      await lru.stop();
    }
    const gone = await doctor([], {
      REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
      TOOLGATE_WORKER_QUEUES: 'fast',
    });
    expect(gone.code).toBe(1);
    expect(gone.check('redis')).toMatchObject({ status: 'fail' });
    expect(gone.check('redis')!.detail).toContain('ECONNREFUSED');
  });

  it('finds the Docker engine and the sandbox images, and fails a missing image', async () => {
    const present = await doctor([], {
      REDIS_URL: inject('redisUrl'),
      TOOLGATE_SANDBOX_DRIVER: 'docker',
    });
    expect(present.check('sandbox driver')).toMatchObject({ status: 'ok' });
    // Built from this checkout's deploy/sandbox by build-images.sh: same hash, "current".
    expect(present.check('image python')).toMatchObject({
      status: 'ok',
      detail: 'toolgate/sandbox-python:local (current)',
    });
    expect(present.check('cgroups')?.status).toBe('ok');
    expect(present.check('disk workspaces')?.status).toMatch(/ok|warn/);

    const file = await configFile('ghost.json', {
      sandbox: {
        driver: 'docker',
        images: {
          python: { docker: 'toolgate/sandbox-python:local', rootfs: '/nonexistent' },
          ghost: { docker: `toolgate/sandbox-ghost:${randomUUID().slice(0, 8)}`, rootfs: '/x' },
        },
      },
    });
    const missing = await doctor(['--config', file], { REDIS_URL: inject('redisUrl') });
    expect(missing.code).toBe(1);
    expect(missing.check('image python')?.status).toBe('ok');
    expect(missing.check('image ghost')).toMatchObject({ status: 'fail' });
    expect(missing.check('image ghost')!.detail).toMatch(/toolgate\/sandbox-ghost:\w+ is missing/);
    expect(missing.check('image ghost')!.fix).toContain('scripts/sandbox/build-images.sh');
  });

  it('checks the bwrap root filesystems where bwrap is the driver', async () => {
    const file = await configFile('bwrap.json', {
      sandbox: {
        driver: 'bwrap',
        images: {
          python: {
            docker: 'toolgate/sandbox-python:local',
            rootfs: 'deploy/sandbox/.build/rootfs/python',
          },
          gone: { docker: 'unused:local', rootfs: '/nonexistent/rootfs' },
        },
      },
    });
    const run = await doctor(['--config', file], { REDIS_URL: inject('redisUrl') });
    expect(run.check('sandbox driver')).toMatchObject({ status: 'ok', detail: 'bwrap' });
    expect(run.check('image python')?.status).toBe('ok');
    expect(run.check('image python')!.detail).toContain('(current)');
    expect(run.check('image gone')).toMatchObject({ status: 'fail' });
    expect(run.check('seccomp filter')?.status).toBe('ok');
    expect(run.code).toBe(1);
  });
});

describe("toolgate sandbox prune and the doctor's leftovers check, on the real engine", () => {
  const id = randomUUID().slice(0, 8);
  const made: string[] = [];
  /** docker run -d with labels, like a sandbox (or a compose service) would have. */
  const container = (labels: Record<string, string>): Promise<string> =>
    new Promise((resolve, reject) => {
      const args = ['run', '-d', '--network', 'none', '--entrypoint', 'sleep'];
      for (const [k, v] of Object.entries(labels)) args.push('--label', `${k}=${v}`);
      execFile('docker', [...args, 'toolgate/sandbox-shell:local', '600'], (err, out) => {
        if (err) reject(err);
        else {
          made.push(out.trim());
          resolve(out.trim());
        }
      });
    });
  const exists = (cid: string) =>
    new Promise<boolean>((resolve) =>
      execFile('docker', ['inspect', cid], (err) => resolve(err === null)),
    );
  afterAll(async () => {
    await new Promise((resolve) => execFile('docker', ['rm', '-f', ...made], resolve));
  });

  it('reports and removes the sandboxes of gone deployments only', async () => {
    const sandbox = (extra: Record<string, string>) =>
      container({
        'toolgate.sandbox': '1',
        'toolgate.owner': `prune-test-${id}`,
        'toolgate.created': String(Date.now()),
        'toolgate.image': 'shell',
        'toolgate.deployment': `prune-test-${id}`,
        ...extra,
      });
    // A compose project that is down (no container of it runs), and one that is up.
    const downProject = await sandbox({ 'toolgate.compose-project': `tgdown${id}` });
    await container({ 'com.docker.compose.project': `tgup${id}` });
    const upProject = await sandbox({ 'toolgate.compose-project': `tgup${id}` });
    // A worker of this host whose process is gone, and one that lives (this process).
    const gonePid = await new Promise<number>((resolve) => {
      const child = execFile(process.execPath, ['-e', '0'], () => resolve(child.pid!));
    });
    const deadWorker = await sandbox({
      'toolgate.host': hostname(),
      'toolgate.pid': String(gonePid),
    });
    const liveWorker = await sandbox({
      'toolgate.host': hostname(),
      'toolgate.pid': String(process.pid),
    });
    const env = { REDIS_URL: inject('redisUrl'), TOOLGATE_SANDBOX_DRIVER: 'docker' };

    const report = await doctor([], env);
    const check = report.check('sandbox leftovers');
    expect(check?.status).toBe('warn');
    expect(check!.detail).toContain(`compose project "tgdown${id}" has no running container`);
    expect(check!.detail).toContain(`its worker (pid ${gonePid} on this host) is gone`);
    expect(check!.detail).not.toContain(`tgup${id}`);
    expect(check!.fix).toContain('toolgate sandbox prune');

    type Row = { id: string; reason: string; removed: boolean; composeProject?: string };
    const dry = await toolgate(['sandbox', 'prune', '--dry-run', '--json'], env);
    expect(dry.code).toBe(0);
    const listed = (JSON.parse(dry.stdout) as Row[]).filter((r) => made.includes(r.id));
    expect(listed.map((r) => r.id).sort()).toEqual([downProject, deadWorker].sort());
    expect(listed.every((r) => !r.removed)).toBe(true);
    expect(await exists(downProject)).toBe(true);

    const run = await toolgate(['sandbox', 'prune', '--json'], env);
    expect(run.code).toBe(0);
    const removed = (JSON.parse(run.stdout) as Row[]).filter((r) => made.includes(r.id));
    expect(removed.map((r) => [r.id, r.removed]).sort()).toEqual(
      [
        [downProject, true],
        [deadWorker, true],
      ].sort(),
    );
    expect(await exists(downProject)).toBe(false);
    expect(await exists(deadWorker)).toBe(false);
    expect(await exists(upProject)).toBe(true);
    expect(await exists(liveWorker)).toBe(true);

    // Nothing of ours left to report; the text form says what it did.
    const again = await toolgate(['sandbox', 'prune', '--dry-run'], env);
    expect(again.code).toBe(0);
    expect(again.stdout).not.toContain(`tgdown${id}`);
  }, 60_000);
});

describe('toolgate tools and call, through a running gateway', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack.close();
  });
  const env = () => ({ TOOLGATE_URL: stack.url, TOOLGATE_KEY: KEYS.alice });

  it('lists the tools as a table, or JSON', async () => {
    const table = await toolgate(['tools'], env());
    expect(table.code).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(/^NAME +CATEGORY +SANDBOXED +RISK$/);
    expect(table.stdout).toMatch(/^calculator +math +no +safe$/m);
    expect(table.stdout).toMatch(/^run_python +\S+ +yes +/m);
    const json = await toolgate(['tools', '--json'], env());
    const tools = JSON.parse(json.stdout) as { name: string; sandboxed: boolean }[];
    expect(tools.find((t) => t.name === 'calculator')).toMatchObject({ sandboxed: false });
  });

  it('calls a tool and prints the outcome; errors exit non-zero', async () => {
    const ok = await toolgate(['call', 'calculator', '{"expression":"2+2"}'], env());
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ tool: 'calculator', status: 'ok', result: 4 });

    const failed = await toolgate(['call', 'calculator', '{"expression":"2+"}'], env());
    expect(failed.code).toBe(1);
    expect(JSON.parse(failed.stdout)).toMatchObject({ status: 'error' });

    const queued = await toolgate(
      ['call', 'calculator', '{"expression":"3*3"}', '--wait=false'],
      env(),
    );
    expect(queued.code).toBe(0);
    const { id } = JSON.parse(queued.stdout) as { id: string };
    expect(id).toBeTruthy();
    const res = await stack.call(`/v1/calls/${id}?wait=true`);
    expect(res.status).toBe(200);

    const badJson = await toolgate(['call', 'calculator', '{expression: 2}'], env());
    expect(badJson.code).toBe(2);
    expect(badJson.stderr).toContain('the arguments are not valid JSON');
    const notObject = await toolgate(['call', 'calculator', '[1]'], env());
    expect(notObject.code).toBe(2);
    expect(notObject.stderr).toContain('must be a JSON object');

    const unknown = await toolgate(['call', 'no_such_tool', '{}'], env());
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/404 \w+/);
    const noKey = await toolgate(['call', 'calculator', '{"expression":"1"}'], {
      TOOLGATE_URL: stack.url,
    });
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/401/);
    const down = await toolgate(['tools'], {
      TOOLGATE_URL: `http://127.0.0.1:${await freePort()}`,
      TOOLGATE_KEY: KEYS.alice,
    });
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('cannot reach the gateway');
  });
});

describe('toolgate gateway, worker and up: real services', () => {
  const running: Service[] = [];
  afterAll(async () => {
    for (const s of running) if (s.child.exitCode === null) s.child.kill('SIGKILL');
  });
  const base = () => ({
    REDIS_URL: inject('redisUrl'),
    TOOLGATE_REDIS_PREFIX: `cli${randomUUID().slice(0, 8)}`,
    HOST: '127.0.0.1',
  });

  it('`toolgate gateway` and `toolgate worker --queues fast` answer /healthz and serve a call', async () => {
    const env = {
      ...base(),
      PORT: String(await freePort()),
      WORKER_METRICS_PORT: String(await freePort()),
    };
    const key = 'cli-test-key-0123456789';
    const file = await configFile('services.json', {
      clients: [{ id: 'cli', key }],
      worker: { queues: ['fast', 'sandbox'] },
    });
    const worker = startToolgate(['worker', '--config', file, '--queues', 'fast'], env);
    const gateway = startToolgate(['gateway', '--config', file], env);
    running.push(worker, gateway);
    await gateway.waitFor(/gateway listening/);
    await worker.waitFor(/worker metrics listening/);
    expect((await fetch(`http://127.0.0.1:${env.PORT}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${env.WORKER_METRICS_PORT}/healthz`)).status).toBe(200);
    // --queues fast: no sandbox driver started.
    expect(worker.output()).not.toMatch(/sandbox ready/);
    const call = await toolgate(['call', 'calculator', '{"expression":"6*7"}'], {
      TOOLGATE_URL: `http://127.0.0.1:${env.PORT}`,
      TOOLGATE_KEY: key,
    });
    expect(JSON.parse(call.stdout)).toMatchObject({ status: 'ok', result: 42 });
    gateway.child.kill('SIGTERM');
    worker.child.kill('SIGTERM');
    expect(await gateway.exited).toBe(0);
    expect(await worker.exited).toBe(0);
  }, 60_000);

  it('a bad config exits 2 naming the field', async () => {
    const file = await configFile('bad-port.json', { server: { port: 'eighty' } });
    const gateway = startToolgate(['gateway', '--config', file], base());
    running.push(gateway);
    expect(await gateway.exited).toBe(2);
    expect(gateway.output()).toContain('/server/port');
  });

  it('`toolgate up` with TOOLGATE_SANDBOX=off and a REDIS_URL: both services, JSON lines, stopped together', async () => {
    const env = {
      ...base(),
      TOOLGATE_SANDBOX: 'off',
      TOOLGATE_WORKER_QUEUES: 'fast',
      PORT: String(await freePort()),
      WORKER_METRICS_PORT: String(await freePort()),
      // Not this checkout's console/dist: other test files serve it while this one runs (the
      // console build is the fresh-clone test's).
      TOOLGATE_CONSOLE_DIR: path.join(dir, 'no-console'),
    };
    const up = startToolgate(['up'], env);
    running.push(up);
    await up.waitFor(/"gateway listening"/, 40_000);
    await up.waitFor(/"worker metrics listening"/, 40_000);
    expect((await fetch(`http://127.0.0.1:${env.PORT}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${env.WORKER_METRICS_PORT}/healthz`)).status).toBe(200);
    up.child.kill('SIGTERM');
    expect(await up.exited).toBe(130);
    // Not a terminal: every line is JSON, the development banner included.
    const lines = up.output().split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(3);
    const records = lines.map((l) => JSON.parse(l) as { name?: string; msg?: string });
    const names = new Set(records.map((r) => r.name));
    expect(names).toContain('toolgate-gateway');
    expect(names).toContain('toolgate-worker');
    expect(records.some((r) => r.msg?.includes('development mode'))).toBe(true);
    // Both services went with it.
    await expect(fetch(`http://127.0.0.1:${env.PORT}/healthz`)).rejects.toThrow();
    await expect(fetch(`http://127.0.0.1:${env.WORKER_METRICS_PORT}/healthz`)).rejects.toThrow();
  }, 90_000);

  it('`toolgate up` from a fresh clone (no console/dist) builds the console and serves /console/', async () => {
    // A clone of this checkout as git would give it (tracked and new files, nothing ignored: no
    // console/dist), with this checkout's installed packages: its node_modules linked, each
    // workspace package's own node_modules copied (their links are relative, so they resolve
    // to the clone's packages).
    const clone = `${await mkdtemp(path.join(tmpdir(), 'tg-clone-'))}/`;
    try {
      const files = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], {
        cwd: ROOT,
        encoding: 'utf8',
      })
        .split('\0')
        .filter((f) => f && !f.startsWith('deploy/sandbox/.build'));
      for (const file of files) {
        await mkdir(path.dirname(clone + file), { recursive: true });
        await cp(ROOT + file, clone + file, { verbatimSymlinks: true });
      }
      await symlink(path.join(ROOT, 'node_modules'), `${clone}node_modules`);
      for (const group of ['packages', 'services', '.']) {
        for (const dir of readdirSync(ROOT + group)) {
          const modules = path.join(ROOT, group, dir, 'node_modules');
          if (group === '.' && !['console', 'test', 'bench', 'examples'].includes(dir)) continue;
          if (existsSync(modules))
            await cp(modules, path.join(clone, group, dir, 'node_modules'), {
              recursive: true,
              verbatimSymlinks: true,
            });
        }
      }
      expect(existsSync(`${clone}console/dist`)).toBe(false);

      const env = {
        ...base(),
        TOOLGATE_SANDBOX: 'off',
        TOOLGATE_WORKER_QUEUES: 'fast',
        PORT: String(await freePort()),
        WORKER_METRICS_PORT: String(await freePort()),
      };
      const up = startToolgateIn(clone, ['up'], env);
      running.push(up);
      await up.waitFor(/"gateway listening"/, 120_000);
      const page = await fetch(`http://127.0.0.1:${env.PORT}/console/`);
      expect(page.status, up.output()).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/text\/html/);
      const html = await page.text();
      const script = /<script[^>]+src="(\/console\/assets\/[^"]+\.js)"/.exec(html)?.[1];
      expect(script, html).toBeDefined();
      expect((await fetch(`http://127.0.0.1:${env.PORT}${script}`)).status).toBe(200);
      // Built from the clone's sources, and stamped so the next `up` does not build again.
      expect(up.output()).toContain('console: not built yet');
      expect((await readFile(`${clone}console/dist/.source-hash`, 'utf8')).trim()).toMatch(
        /^[0-9a-f]{64}$/,
      );
      up.child.kill('SIGTERM');
      expect(await up.exited).toBe(130);
    } finally {
      await rm(clone, { recursive: true, force: true });
    }
  }, 180_000);
});

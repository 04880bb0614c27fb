/**
 * Long-lived sandboxes (driver.open) against both real drivers: piped stdio, signals, kill,
 * limits over the sandbox's whole life, no host environment, what a dead worker leaves.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BwrapDriver } from './bwrap.js';
import { CallCgroup, detectCgroups } from './cgroup.js';
import {
  DockerDriver,
  LABEL,
  LABEL_CREATED,
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_IMAGE,
  LABEL_LONG_LIVED,
  LABEL_OWNER,
  LABEL_PID,
} from './docker.js';
import { SandboxError } from './errors.js';
import { REPO_ROOT, testSandboxConfig, whyDriverUnavailable } from './testing.js';
import type { DriverName, SandboxDriver, SandboxProcess } from './types.js';

/**
 * A line-oriented program: echoes each line, sleeps on "sleep", allocates on "alloc <MiB>",
 * reports its environment on "env", writes a file on "write", and survives a SIGINT.
 */
const SERVER = `
import os, sys, time, json
held = []
print("ready", flush=True)
for line in sys.stdin:
    try:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "sleep":
            print("sleeping", flush=True)
            time.sleep(60)
        elif cmd == "alloc":
            held.append(b"x" * (int(arg) << 20))
            print("allocated", sum(len(h) for h in held) >> 20, flush=True)
        elif cmd == "env":
            print("env", json.dumps(dict(os.environ)), flush=True)
        elif cmd == "write":
            open("/workspace/out.txt", "w").write(arg)
            print("wrote", flush=True)
        elif cmd == "flood":
            sys.stdout.write("y" * (int(arg) << 20))
            sys.stdout.flush()
            print("flooded", file=sys.stderr, flush=True)
        else:
            print("echo:" + line.strip(), flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
`;

/** Reads a process's stdout as lines, waiting for one that matches. */
function lineReader(p: SandboxProcess) {
  let text = '';
  const waiters = new Set<() => void>();
  p.stdout.setEncoding('utf8');
  p.stdout.on('data', (s: string) => {
    text += s;
    for (const w of waiters) w();
  });
  return {
    get text() {
      return text;
    },
    async waitFor(re: RegExp, timeoutMs = 15_000): Promise<string> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        // Whole lines only: a line's text can arrive before its newline.
        const m = re.exec(text.slice(0, text.lastIndexOf('\n') + 1));
        if (m) return m[0];
        if (Date.now() > deadline)
          throw new Error(`no ${re} in stdout within ${timeoutMs} ms: ${text.slice(-500)}`);
        await new Promise<void>((resolve) => {
          const w = () => {
            waiters.delete(w);
            resolve();
          };
          waiters.add(w);
          setTimeout(w, 100);
        });
      }
    },
  };
}

/** Host pids whose command line has the marker (a sandbox's processes are host processes). */
async function hostPidsWith(marker: string): Promise<number[]> {
  const found: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    const cmdline = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.split('\0').includes(marker)) found.push(Number(name));
  }
  return found;
}

const settledWithin = (p: Promise<unknown>, ms: number) =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

const drivers: DriverName[] = ['docker', 'bwrap'];
const reasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyDriverUnavailable(d)] as const)),
) as Record<DriverName, string | undefined>;
for (const d of drivers) {
  if (reasons[d]) console.warn(`${d} open() tests skipped: ${reasons[d]}`);
}

describe.each(drivers)('%s driver open()', (driverName) => {
  let dir: string;
  let driver: SandboxDriver;
  const open = (marker: string, extra: Partial<Parameters<SandboxDriver['open']>[0]> = {}) =>
    driver.open({ image: 'python', argv: ['python3', '-u', '-c', SERVER, marker], ...extra });
  const marker = () => `tg-proc-${randomBytes(6).toString('hex')}`;
  // A test of one driver's own machinery: defined in that driver's list only.
  const itOn = (d: DriverName, unavailable: boolean): typeof it.skip =>
    d !== driverName
      ? ((() => undefined) as unknown as typeof it.skip)
      : unavailable
        ? it.skip
        : it;

  beforeAll(async () => {
    if (reasons[driverName]) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-proc-${driverName}-`));
    await chmod(dir, 0o711);
    const config = testSandboxConfig(driverName, dir, { pool: { size: 1 } });
    driver = driverName === 'docker' ? new DockerDriver(config) : new BwrapDriver(config);
    await driver.start();
  });
  afterAll(async () => {
    await driver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(reasons[driverName] !== undefined)(
    'answers every line written to it, staying alive between writes',
    async () => {
      const p = await open(marker());
      const out = lineReader(p);
      await out.waitFor(/^ready$/m);
      p.stdin.write('one\n');
      await out.waitFor(/^echo:one$/m);
      await new Promise((r) => setTimeout(r, 300));
      p.stdin.write('two\n');
      p.stdin.write('three\n');
      await out.waitFor(/^echo:three$/m);
      expect(out.text).toBe('ready\necho:one\necho:two\necho:three\n');
      expect(await settledWithin(p.exited, 100)).toBe(false);
      // Its stdin closed, the program ends by itself: a normal exit, not a kill.
      p.stdin.end();
      expect(await p.exited).toEqual({ exitCode: 0, oomKilled: false, killed: false });
      expect(driver.stats().processes).toBe(0);
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'delivers SIGINT to the program, which goes on running',
    async () => {
      const p = await open(marker());
      const out = lineReader(p);
      await out.waitFor(/^ready$/m);
      p.stdin.write('sleep\n');
      // Interrupted in its sleep (not while it reads the line).
      await out.waitFor(/^sleeping$/m);
      await p.signal('SIGINT');
      await out.waitFor(/^interrupted$/m);
      p.stdin.write('still here\n');
      await out.waitFor(/^echo:still here$/m);
      expect(await settledWithin(p.exited, 100)).toBe(false);
      await p.kill();
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'kill() ends every process of the sandbox and removes it, once however often called',
    async () => {
      const m = marker();
      const p = await open(m);
      const out = lineReader(p);
      await out.waitFor(/^ready$/m);
      expect((await hostPidsWith(m)).length).toBeGreaterThan(0);
      await Promise.all([p.kill(), p.kill(), p.kill()]);
      expect(await p.exited).toEqual({ exitCode: 137, oomKilled: false, killed: true });
      expect(await hostPidsWith(m)).toEqual([]);
      await p.kill();
      // Nothing to signal any more: not an error.
      await p.signal('SIGINT');
      expect(driver.stats().processes).toBe(0);
      if (driverName === 'docker') {
        const left = await new Docker().listContainers({
          all: true,
          filters: { label: [`${LABEL_OWNER}=${(driver as DockerDriver).ownerId}`] },
        });
        // The warm pool's containers only (open() never takes one).
        expect(left.every((c) => c.Labels[LABEL_LONG_LIVED] === undefined)).toBe(true);
      }
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'holds the memory limit over its whole life: small allocations live on, a large one kills it',
    async () => {
      const p = await open(marker(), { limits: { memoryMb: 96 } });
      const out = lineReader(p);
      await out.waitFor(/^ready$/m);
      for (let i = 1; i <= 3; i++) {
        p.stdin.write('alloc 8\n');
        await out.waitFor(new RegExp(`^allocated ${8 * i}$`, 'm'));
      }
      const stats = await p.stats();
      // 24 MiB held by the program itself, read from the sandbox's cgroup.
      expect(stats.memoryBytes).toBeGreaterThan(24 * 1024 * 1024);
      p.stdin.write('alloc 200\n');
      const exit = await p.exited;
      expect(exit).toMatchObject({ oomKilled: true, killed: false });
      expect(out.text).not.toMatch(/allocated 224/);
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    "gets none of the worker's environment",
    async () => {
      process.env.TOOLGATE_PROC_TEST_SECRET = 'do-not-leak';
      try {
        const p = await open(marker());
        const out = lineReader(p);
        await out.waitFor(/^ready$/m);
        p.stdin.write('env\n');
        const line = await out.waitFor(/^env .*\n/m);
        const env = JSON.parse(line.slice(4)) as Record<string, string>;
        expect(env.TOOLGATE_PROC_TEST_SECRET).toBeUndefined();
        expect(JSON.stringify(env)).not.toContain('do-not-leak');
        // The sandbox's own few: no host HOME, USER, PWD or anything else of the worker's.
        expect(env.HOME).toBe('/tmp');
        // What the sandbox sets itself, and the image's own ENV (the python image's).
        const own = [
          'PATH',
          'LANG',
          'HOME',
          'TMPDIR',
          'PYTHONUNBUFFERED',
          'PYTHONDONTWRITEBYTECODE',
        ];
        expect(
          Object.keys(env).filter((k) => !own.includes(k) && process.env[k] === env[k]),
        ).toEqual([]);
        await p.kill();
      } finally {
        delete process.env.TOOLGATE_PROC_TEST_SECRET;
      }
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'mounts the workspace read-write, as run() does',
    async () => {
      const ws = path.join(dir, 'workspaces', 'client-a');
      await mkdir(ws, { recursive: true });
      await chmod(ws, 0o777);
      await writeFile(path.join(ws, 'placeholder'), '');
      const p = await open(marker(), { workspace: ws });
      const out = lineReader(p);
      await out.waitFor(/^ready$/m);
      p.stdin.write('write from-the-sandbox\n');
      await out.waitFor(/^wrote$/m);
      expect(await readFile(path.join(ws, 'out.txt'), 'utf8')).toBe('from-the-sandbox');
      await p.kill();
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'holds at most the buffer for a reader that is behind, pausing the program, and loses nothing',
    async () => {
      const buffer = 256 * 1024;
      const p = await driver.open({
        image: 'python',
        argv: ['python3', '-u', '-c', SERVER, marker()],
        outputBufferBytes: buffer,
      });
      p.stdin.write('flood 4\n');
      // Nobody reads for a while: the program is held at its writes, the worker's copy bounded.
      await new Promise((r) => setTimeout(r, 1000));
      expect(p.stdout.readableLength).toBeLessThanOrEqual(buffer + 256 * 1024);
      expect(await settledWithin(p.exited, 10)).toBe(false);
      let bytes = 0;
      p.stdout.on('data', (b: Buffer) => (bytes += b.length));
      let err = '';
      p.stderr.on('data', (b: Buffer) => (err += b.toString()));
      // "ready\n", then 4 MiB of y. 16 times the buffer; the machine may be loaded: allow it
      // time. stdout and stderr are separate streams, so "flooded" on stderr may come before the
      // last stdout chunk: wait for both (CI once read 4,005,894 bytes the moment it came).
      const total = 6 + 4 * 1024 * 1024;
      for (let i = 0; i < 800 && !(err.includes('flooded') && bytes >= total); i++)
        await new Promise((r) => setTimeout(r, 50));
      expect(err).toContain('flooded');
      expect(bytes).toBe(total);
      await p.kill();
    },
    60_000,
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'refuses bad requests with stable codes',
    async () => {
      const code = (f: () => Promise<unknown>) =>
        f().then(
          () => 'resolved',
          (e: unknown) => (e instanceof SandboxError ? e.code : String(e)),
        );
      expect(await code(() => driver.open({ image: 'nope', argv: ['true'] }))).toBe(
        'unknown_image',
      );
      expect(await code(() => driver.open({ image: 'python', argv: [] }))).toBe('invalid_request');
      expect(
        await code(() => driver.open({ image: 'python', argv: ['true'], outputBufferBytes: 10 })),
      ).toBe('invalid_request');
      expect(
        await code(() => driver.open({ image: 'python', argv: ['true'], network: true })),
      ).toBe('invalid_request');
      const p = await open(marker());
      expect(await code(() => p.signal('SIGKILL' as 'SIGINT'))).toBe('invalid_request');
      await p.kill();
      const aborted = new AbortController();
      aborted.abort();
      expect(await code(() => open(marker(), { signal: aborted.signal }))).toBe('aborted');
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'close() of the driver kills the sandboxes it opened',
    async () => {
      const m = marker();
      const config = testSandboxConfig(driverName, dir, { pool: { size: 0 } });
      const other = driverName === 'docker' ? new DockerDriver(config) : new BwrapDriver(config);
      const p = await other.open({ image: 'python', argv: ['python3', '-u', '-c', SERVER, m] });
      await lineReader(p).waitFor(/^ready$/m);
      await other.close();
      expect(await p.exited).toMatchObject({ killed: true });
      expect(await hostPidsWith(m)).toEqual([]);
    },
  );

  it.skipIf(reasons[driverName] !== undefined)(
    'leaves nothing running when its worker dies',
    async () => {
      const m = marker();
      // A worker of its own, killed without a chance to clean up.
      const script = path.join(dir, 'dying-worker.mts');
      await writeFile(
        script,
        `import { ${driverName === 'docker' ? 'DockerDriver as D' : 'BwrapDriver as D'} } from ${JSON.stringify(
          path.join(REPO_ROOT, `packages/sandbox/src/${driverName}.ts`),
        )};
import { testSandboxConfig } from ${JSON.stringify(path.join(REPO_ROOT, 'packages/sandbox/src/testing.ts'))};
const d = new D(testSandboxConfig(${JSON.stringify(driverName)}, ${JSON.stringify(dir)}, { pool: { size: 0 } }), { ownerId: 'dying-${m}' });
const p = await d.open({ image: 'python', argv: ['python3', '-c', 'import time; time.sleep(300)', ${JSON.stringify(m)}] });
process.stdout.write('opened\\n');
setInterval(() => undefined, 1000);
`,
      );
      const child = spawn(process.execPath, ['--import', 'tsx', script], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const gone = new Promise((r) => child.once('exit', r));
      try {
        await new Promise<void>((resolve, reject) => {
          child.stdout.on('data', (b: Buffer) => b.toString().includes('opened') && resolve());
          child.once('exit', (code) => reject(new Error(`worker exited ${code}`)));
        });
        // The entrypoint execs the program a moment after open() resolves.
        for (let i = 0; i < 50 && (await hostPidsWith(m)).length === 0; i++)
          await new Promise((r) => setTimeout(r, 100));
        expect((await hostPidsWith(m)).length).toBeGreaterThan(0);
      } finally {
        child.kill('SIGKILL');
        await gone;
      }
      if (driverName === 'docker') {
        // The container outlives its worker until a reaper (here: this test's driver) sees the
        // owner dead: the pid on its label is gone, and so is its heartbeat (stale by then).
        await rm(path.join(dir, 'state/owners', `dying-${m}`), { force: true });
      }
      // bwrap's die with their worker as a rule; the reaper catches one that did not.
      await driver.reap?.();
      for (let i = 0; i < 50 && (await hostPidsWith(m)).length > 0; i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(await hostPidsWith(m)).toEqual([]);
    },
  );

  itOn('bwrap', reasons.bwrap !== undefined || process.getuid?.() !== 0)(
    'the bwrap reaper kills what is left in a dead worker’s cgroup, and removes it',
    async () => {
      const mode = await detectCgroups();
      // A pid that was a worker's and is gone now.
      const gone = spawn('true');
      await new Promise((r) => gone.once('exit', r));
      const name = `${gone.pid}-${Date.now().toString(36)}-leftover`;
      const cg = await CallCgroup.create(mode, name, {
        memoryMb: 64,
        cpus: 1,
        pids: 16,
        fileSizeMb: 1,
        tmpfsMb: 1,
      });
      expect(cg).toBeDefined();
      const m = marker();
      // Node itself, by its path: a `python3` on PATH may be a shim (pyenv's is a bash script
      // that forks), and the test counts the processes carrying the marker.
      const orphan = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 300_000)', m], {
        detached: true,
        stdio: 'ignore',
      });
      orphan.unref();
      for (const file of cg!.procsFiles) await writeFile(file, String(orphan.pid));
      expect((await hostPidsWith(m)).length).toBe(1);
      expect(await (driver as BwrapDriver).reap()).toBeGreaterThanOrEqual(1);
      for (let i = 0; i < 50 && (await hostPidsWith(m)).length > 0; i++)
        await new Promise((r) => setTimeout(r, 50));
      expect(await hostPidsWith(m)).toEqual([]);
      // The cgroup itself is gone too.
      const cgDir = path.dirname(cg!.procsFiles[0]!);
      expect(
        await readdir(cgDir).then(
          () => 'present',
          () => 'gone',
        ),
      ).toBe('gone');
    },
  );

  itOn('docker', reasons.docker !== undefined)(
    'the reaper spares a live worker’s long-lived sandbox past reaper.maxAgeMs',
    async () => {
      const docker = new Docker();
      const d = driver as DockerDriver;
      const make = (extra: Record<string, string>) =>
        docker
          .createContainer({
            Image: 'toolgate/sandbox-shell:local',
            Entrypoint: ['sleep', '300'],
            Labels: {
              [LABEL]: '1',
              [LABEL_OWNER]: 'live-worker',
              [LABEL_HOST]: hostname(),
              [LABEL_PID]: String(process.pid),
              [LABEL_CREATED]: String(Date.now() - 3_600_000),
              [LABEL_IMAGE]: 'shell',
              [LABEL_DEPLOYMENT]: d.deploymentId,
              ...extra,
            },
            HostConfig: { NetworkMode: 'none' },
          })
          .then(async (c) => (await c.start(), c));
      const longLived = await make({ [LABEL_LONG_LIVED]: '1' });
      const call = await make({});
      try {
        await d.reap();
        const exists = (c: Docker.Container) =>
          c.inspect().then(
            () => true,
            () => false,
          );
        for (let i = 0; i < 50 && (await exists(call)); i++)
          await new Promise((r) => setTimeout(r, 100));
        expect({ longLived: await exists(longLived), call: await exists(call) }).toEqual({
          longLived: true,
          call: false,
        });
      } finally {
        await longLived.remove({ force: true }).catch(() => undefined);
        await call.remove({ force: true }).catch(() => undefined);
      }
    },
  );
});

/**
 * docker-compose.yml for real: builds the local base images and the gateway/worker images
 * (scripts/deploy/build-images.sh, cached after the first run), brings up redis + gateway +
 * worker under a unique project name on a loopback port, runs a calculator call and a sandboxed
 * run_python call through it, scales the workers, and tears everything down (`down -v`).
 *
 * Skipped, with the reason printed, only when no Docker engine answers or docker-compose is
 * missing. Needs the sandbox images (scripts/sandbox/build-images.sh; built here if missing).
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { freePort } from '../support/redis-server.js';
import { hostname } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The images built and run: TOOLGATE_IMAGE_TAG (default local, what scripts/test.sh builds). */
const TAG = process.env.TOOLGATE_IMAGE_TAG || 'local';

function whySkip(): string | undefined {
  if (spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 20_000 }).status !== 0) {
    return 'no Docker engine answers (`docker info` failed; bash scripts/sandbox/ensure-docker.sh starts one)';
  }
  if (spawnSync('docker-compose', ['version'], { stdio: 'ignore', timeout: 20_000 }).status !== 0) {
    return 'docker-compose is not installed (apt-get install -y docker-compose)';
  }
  return undefined;
}

const skipReason = whySkip();
if (skipReason) console.warn(`[test/deploy/compose.test.ts] skipped: ${skipReason}`);

/** Runs a command to completion; rejects with its output when it fails. */
function run(
  cmd: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: ROOT,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const timer = setTimeout(() => child.kill('SIGTERM'), options.timeoutMs ?? 120_000);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else
        reject(
          new Error(`${cmd} ${args.join(' ')} exited ${code ?? signal}:\n${out.slice(-4000)}`),
        );
    });
  });
}

async function until<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  timeoutMs: number,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}: ${String(last ?? '')}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe.skipIf(skipReason !== undefined)(
  'docker-compose: the core stack from local images',
  () => {
    const project = `tgtest${randomBytes(4).toString('hex')}`;
    const assistantKey = `assistant-${randomBytes(12).toString('hex')}`;
    const dataDir = mkdtempSync('/tmp/toolgate-compose-');
    let env: NodeJS.ProcessEnv;
    let base: string;
    let compose: (args: string[], timeoutMs?: number) => Promise<string>;
    const logs = () =>
      compose(['logs', '--no-color', '--tail', '40']).catch((e: Error) => e.message);
    let prometheusUrl: string;

    const call = (tool: string, args: unknown) =>
      fetch(`${base}/tools/${tool}/execute`, {
        method: 'POST',
        headers: { authorization: `Bearer ${assistantKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(args),
      });

    beforeAll(async () => {
      // Idempotent: seconds when the images are up to date; a few minutes on a cold machine.
      await run('bash', ['scripts/deploy/build-images.sh'], {
        env: { ...process.env, TOOLGATE_IMAGE_TAG: TAG },
        timeoutMs: 900_000,
      });
      const sandboxImages = spawnSync(
        'docker',
        ['image', 'inspect', 'toolgate/sandbox-python:local'],
        {
          stdio: 'ignore',
        },
      );
      if (sandboxImages.status !== 0) {
        await run('bash', ['scripts/sandbox/build-images.sh'], { timeoutMs: 900_000 });
      }
      const port = await freePort();
      base = `http://127.0.0.1:${port}`;
      prometheusUrl = `http://127.0.0.1:${await freePort()}`;
      env = {
        ...process.env,
        TOOLGATE_ADMIN_KEY: `admin-${randomBytes(12).toString('hex')}`,
        TOOLGATE_ASSISTANT_KEY: assistantKey,
        TOOLGATE_BIND_ADDR: '127.0.0.1',
        TOOLGATE_HTTP_PORT: String(port),
        TOOLGATE_DATA_DIR: dataDir,
        TOOLGATE_IMAGE_TAG: TAG,
        TOOLGATE_LOG_LEVEL: 'info',
        TOOLGATE_TEST_HOSTNAME: hostname(),
        // Prometheus from Debian's package (scripts/deploy/build-base-images.sh): no registry here.
        PROMETHEUS_IMAGE: 'toolgate/prometheus:2',
        PROMETHEUS_PORT: new URL(prometheusUrl).port,
        // No collector in this test: the spans have nowhere to go.
        OTEL_TRACES_EXPORTER: 'none',
      };
      const files = ['-f', 'docker-compose.yml', '-f', 'test/deploy/compose.test-override.yml'];
      compose = (args, timeoutMs) =>
        run('docker-compose', ['-p', project, ...files, ...args], { env, timeoutMs });
      await compose(['config', '-q']);
      await compose(['up', '-d', '--no-build'], 180_000);
      await until(
        'the gateway to be ready with one worker',
        async () => {
          const res = await fetch(`${base}/readyz`);
          return res.status === 200 ? true : undefined;
        },
        90_000,
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}\n${await logs()}`);
      });
    }, 1_200_000);

    afterAll(async () => {
      if (!compose) return;
      await compose(
        ['--profile', 'observability', 'down', '-v', '--remove-orphans', '--timeout', '20'],
        120_000,
      ).catch((err: Error) => {
        console.error(`docker-compose down failed: ${err.message}`);
      });
      rmSync(dataDir, { recursive: true, force: true });
    }, 180_000);

    it('answers a calculator call through gateway → redis → worker', async () => {
      const res = await call('calculator', { expression: '2*(3+4)' });
      if (res.status !== 200)
        expect.fail(`HTTP ${res.status}: ${await res.text()}\n${await logs()}`);
      expect(await res.json()).toMatchObject({ tool: 'calculator', status: 'ok', result: 14 });
    });

    it('runs run_python in a sandbox container the worker starts through the Docker socket', async (ctx) => {
      const tools = (await (
        await fetch(`${base}/tools`, { headers: { authorization: `Bearer ${assistantKey}` } })
      ).json()) as { name: string }[];
      if (!tools.some((t) => t.name === 'run_python')) {
        ctx.skip(
          `the worker image registers no run_python (tools: ${tools.map((t) => t.name).join(', ')})`,
        );
      }
      const res = await call('run_python', {
        code: "import os\nopen('from-compose.txt', 'w').write('hi')\nprint(6 * 7, os.getcwd(), os.getuid())",
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        status: string;
        result?: { stdout: string; exitCode: number };
      };
      expect(body, JSON.stringify(body)).toMatchObject({ status: 'ok', result: { exitCode: 0 } });
      expect(body.result!.stdout).toBe('42 /workspace 10001\n');
      // The workspace the sandbox wrote is the host path the worker sees: same path both sides.
      const written = path.join(dataDir, 'workspaces', 'assistant', 'from-compose.txt');
      expect(existsSync(written), written).toBe(true);
      expect(readFileSync(written, 'utf8')).toBe('hi');
    });

    it('runs `toolgate` in the images: the services are its commands, and doctor checks from inside', async () => {
      for (const target of ['gateway', 'worker']) {
        const cmd = await run('docker', [
          'image',
          'inspect',
          '-f',
          '{{json .Config.Cmd}}',
          `toolgate/${target}:local`,
        ]);
        expect(JSON.parse(cmd.trim())).toEqual(['toolgate', target]);
      }
      // `|| true`: a host-dependent ✗ (disk, mounts) must not hide what this test reads.
      const out = await compose([
        'exec',
        '-T',
        'worker',
        'sh',
        '-c',
        'toolgate doctor --json || true',
      ]);
      const checks = JSON.parse(out.slice(out.indexOf('['), out.lastIndexOf(']') + 1)) as {
        name: string;
        status: string;
      }[];
      const status = (name: string) => checks.find((c) => c.name === name)?.status;
      expect(status('config'), out).toBe('ok');
      expect(status('redis version'), out).toBe('ok');
      expect(status('redis eviction'), out).toBe('ok');
      expect(status('sandbox driver'), out).toBe('ok');
      expect(status('image python'), out).toBe('ok');
    });

    it('scales to two workers that the gateway sees and that resolve by service name', async () => {
      await compose(['up', '-d', '--no-build', '--scale', 'worker=2'], 180_000);
      await until(
        'two live workers',
        async () => {
          const body = (await (await fetch(`${base}/readyz`)).json()) as { workers?: number };
          return body.workers === 2 ? true : undefined;
        },
        60_000,
      );
      // What Prometheus' dns_sd_configs on "worker" sees: one address per worker.
      const addresses = await compose([
        'exec',
        '-T',
        'gateway',
        'node',
        '-e',
        "require('node:dns').lookup('worker',{all:true},(e,a)=>{if(e)throw e;console.log(JSON.stringify(a.map(x=>x.address)))})",
      ]);
      expect(JSON.parse(addresses.trim().split('\n').pop()!)).toHaveLength(2);
    }, 240_000);

    it('Prometheus discovers the gateway and both workers by DNS and loads every alert rule', async () => {
      await compose(
        ['--profile', 'observability', 'up', '-d', '--no-build', 'prometheus'],
        120_000,
      );
      const api = async <T>(path: string) =>
        ((await (await fetch(`${prometheusUrl}/api/v1/${path}`)).json()) as { data: T }).data;
      type Targets = { activeTargets: { labels: { job: string }; health: string }[] };
      const up = await until(
        'the gateway and two workers to be scraped',
        async () => {
          const { activeTargets } = await api<Targets>('targets');
          const healthy = (job: string) =>
            activeTargets.filter((t) => t.labels.job === job && t.health === 'up').length;
          const counts = {
            gateway: healthy('toolgate-gateway'),
            worker: healthy('toolgate-worker'),
          };
          return counts.gateway === 1 && counts.worker === 2 ? counts : undefined;
        },
        90_000,
      );
      expect(up).toEqual({ gateway: 1, worker: 2 });
      type Rules = { groups: { rules: { name: string; health: string; lastError?: string }[] }[] };
      const rules = await until(
        'every alert rule to be evaluated',
        async () => {
          const all = (await api<Rules>('rules')).groups.flatMap((g) => g.rules);
          return all.length > 0 && all.every((r) => r.health !== 'unknown') ? all : undefined;
        },
        60_000,
      );
      expect(rules.filter((r) => r.health !== 'ok')).toEqual([]);
      expect(rules.length).toBeGreaterThanOrEqual(10);
    }, 240_000);

    it('`down` leaves no sandbox container of the project behind', async () => {
      const ofProject = () =>
        spawnSync(
          'docker',
          ['ps', '-aq', '--filter', `label=toolgate.compose-project=${project}`],
          { encoding: 'utf8' },
        )
          .stdout.split('\n')
          .filter(Boolean);
      // The workers' warm pools, labelled with the project their worker runs in.
      expect(ofProject().length).toBeGreaterThan(0);
      await compose(
        ['--profile', 'observability', 'down', '-v', '--remove-orphans', '--timeout', '20'],
        120_000,
      );
      expect(ofProject()).toEqual([]);
    }, 180_000);
  },
);

/**
 * The chart's pods, run for real without a cluster: each rendered Deployment's pod spec
 * (image, command, env from the Secret, the ConfigMap, volumes, securityContext) is turned into
 * `docker run` flags one for one, on a Docker network with toolgate/redis, and driven through
 * the gateway like a user would: probes answer where the spec says, a calculator call runs on
 * the fast pool, sandboxed calls run on the sandbox pool with the bwrap driver (values-bwrap)
 * and with the docker driver (values-docker). So the security settings the chart gives a
 * sandbox pod are shown to be enough; and taking away any one of the bwrap pod's settings that
 * bwrap itself depends on breaks sandboxing, so none is there for nothing.
 *
 * What Docker cannot reproduce: `hostUsers: false` (a user namespace per pod; Docker's
 * userns-remap is per daemon), so bwrap pods run here in the host's user namespace; Kubernetes'
 * NetworkPolicies (no CNI here; helm.test.ts checks their rules).
 *
 * Skipped, with the reason printed, only when no Docker engine answers or the images are not
 * built (scripts/test.sh builds them: scripts/deploy/build-images.sh, scripts/sandbox/build-images.sh).
 * toolgate/worker-bwrap is built here from deploy/helm/images/worker-bwrap.Dockerfile (cached).
 * TOOLGATE_IMAGE_TAG picks the images under test (default `local`, what scripts/test.sh builds).
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CHART,
  KEYS,
  ROOT,
  containerEnv,
  podSpec,
  render,
  type Container,
  type PodSpec,
  type Rendered,
} from './helm-render.js';

const BUILD_DIR = path.join(ROOT, 'deploy/sandbox/.build');
/** The images under test: scripts/deploy/build-images.sh's TOOLGATE_IMAGE_TAG (default local). */
const TAG = process.env.TOOLGATE_IMAGE_TAG || 'local';
const IMAGE_TAG = ['--set', `image.tag=${TAG}`];
const BWRAP_IMAGE = `toolgate/worker-bwrap:${TAG}`;

function docker(args: string[], timeoutMs = 120_000): string {
  // The classic builder, as scripts/deploy/build-images.sh uses: no buildx plugin needed.
  const env = { ...process.env, DOCKER_BUILDKIT: '0' };
  const out = spawnSync('docker', args, { encoding: 'utf8', timeout: timeoutMs, env });
  if (out.status !== 0) {
    throw new Error(`docker ${args.slice(0, 3).join(' ')} … failed: ${out.stderr || out.error}`);
  }
  return out.stdout.trim();
}

function whySkip(): string | undefined {
  if (spawnSync('docker', ['info'], { stdio: 'ignore', timeout: 20_000 }).status !== 0)
    return 'no Docker engine answers (bash scripts/sandbox/ensure-docker.sh starts one)';
  for (const image of [
    `toolgate/gateway:${TAG}`,
    `toolgate/worker:${TAG}`,
    'toolgate/redis:7',
    'toolgate/sandbox-python:local',
  ]) {
    if (spawnSync('docker', ['image', 'inspect', image], { stdio: 'ignore' }).status !== 0)
      return `image ${image} is not built (scripts/deploy/build-images.sh, scripts/sandbox/build-images.sh)`;
  }
  if (!existsSync(path.join(BUILD_DIR, 'seccomp/sandbox.bpf')))
    return 'deploy/sandbox/.build is not built (scripts/sandbox/build-images.sh)';
  return undefined;
}

const skipReason = whySkip();
if (skipReason) console.warn(`[test/deploy/helm-pods.test.ts] skipped: ${skipReason}`);

/**
 * `docker run` flags for one container of a rendered pod. Every securityContext field the chart
 * sets has a translation; an unknown one fails the test rather than being dropped.
 */
function runFlags(
  r: Rendered,
  pod: PodSpec,
  c: Container,
  configDir: string,
  publish = true,
): string[] {
  const flags: string[] = [];
  const podSc = { ...pod.securityContext } as Record<string, unknown>;
  const sc = { ...c.securityContext } as Record<string, unknown>;
  const user = (sc.runAsUser ?? podSc.runAsUser) as number | undefined;
  const group = (sc.runAsGroup ?? podSc.runAsGroup) as number | undefined;
  if (user !== undefined) flags.push('--user', `${user}:${group ?? user}`);
  for (const key of ['runAsUser', 'runAsGroup', 'runAsNonRoot']) {
    delete podSc[key];
    delete sc[key];
  }
  const profile = (from: Record<string, unknown>, key: string, opt: string) => {
    const p = from[key] as { type: string } | undefined;
    delete from[key];
    if (!p) return;
    if (p.type === 'Unconfined') flags.push('--security-opt', `${opt}=unconfined`);
    else if (p.type !== 'RuntimeDefault') throw new Error(`no docker flag for ${key} ${p.type}`);
  };
  for (const from of [podSc, sc]) {
    profile(from, 'seccompProfile', 'seccomp');
    profile(from, 'appArmorProfile', 'apparmor');
  }
  if (sc.allowPrivilegeEscalation === false) flags.push('--security-opt', 'no-new-privileges');
  delete sc.allowPrivilegeEscalation;
  if (sc.readOnlyRootFilesystem === true) flags.push('--read-only');
  delete sc.readOnlyRootFilesystem;
  if (sc.procMount === 'Unmasked') flags.push('--security-opt', 'systempaths=unconfined');
  delete sc.procMount;
  const caps = sc.capabilities as { drop?: string[]; add?: string[] } | undefined;
  for (const cap of caps?.drop ?? []) flags.push('--cap-drop', cap);
  for (const cap of caps?.add ?? []) flags.push('--cap-add', cap);
  delete sc.capabilities;
  const left = [...Object.keys(podSc), ...Object.keys(sc)];
  if (left.length > 0) throw new Error(`no docker flag for securityContext ${left.join(', ')}`);

  for (const [name, value] of Object.entries(containerEnv(r, c)))
    flags.push('-e', `${name}=${value}`);
  for (const m of c.volumeMounts ?? []) {
    const volume = pod.volumes!.find((v) => v.name === m.name)!;
    if (m.name === 'config') flags.push('-v', `${configDir}:${m.mountPath}:ro`);
    else if (volume.hostPath) flags.push('-v', `${volume.hostPath.path}:${m.mountPath}`);
    else if (volume.emptyDir) flags.push('--mount', `type=tmpfs,destination=${m.mountPath}`);
    else throw new Error(`no docker flag for volume ${m.name}`);
  }
  if (publish) for (const p of c.ports ?? []) flags.push('-p', `127.0.0.1::${p.containerPort}`);
  return flags;
}

/** The image the chart names for bwrap sandbox workers (cached by Docker after the first build). */
let bwrapImageBuilt = false;
function buildBwrapImage(): void {
  if (bwrapImageBuilt) return;
  const dockerfile = path.join(ROOT, 'deploy/helm/images/worker-bwrap.Dockerfile');
  // Labelled like scripts/deploy/build-images.sh's images, whose prune removes superseded builds.
  docker(
    [
      'build',
      '-q',
      '--force-rm',
      '--label',
      'toolgate.deploy=1',
      '-f',
      dockerfile,
      '--build-arg',
      `WORKER_IMAGE=toolgate/worker:${TAG}`,
      '-t',
      BWRAP_IMAGE,
      BUILD_DIR,
    ],
    300_000,
  );
  bwrapImageBuilt = true;
}

interface Started {
  name: string;
  /** Loopback URL of a container port, by the port's name in the pod spec. */
  url(port: string): string;
}

describe.skipIf(skipReason)('the chart’s pods, run as containers', () => {
  const id = randomBytes(3).toString('hex');
  const network = `tg-helm-${id}`;
  const containers: string[] = [];
  const dirs: string[] = [];
  let networkMade = false;
  const ensureNetwork = () => {
    if (!networkMade) docker(['network', 'create', network]);
    networkMade = true;
  };

  afterAll(() => {
    for (const name of containers) spawnSync('docker', ['rm', '-f', name], { stdio: 'ignore' });
    spawnSync('docker', ['network', 'rm', network], { stdio: 'ignore' });
    for (const dir of dirs) {
      // The docker driver's workspaces belong to the sandbox uid: remove them as root, in a container.
      spawnSync(
        'docker',
        [
          'run',
          '--rm',
          '-v',
          `${dir}:/d`,
          'toolgate/redis:7',
          'rm',
          '-rf',
          '/d/workspaces',
          '/d/sandbox',
        ],
        {
          stdio: 'ignore',
        },
      );
      rmSync(dir, { recursive: true, force: true });
    }
  });

  function start(r: Rendered, deployment: string, configDir: string): Started {
    const pod = podSpec(r, deployment);
    const c = pod.containers[0]!;
    const name = `${deployment}-${id}`;
    docker([
      'run',
      '-d',
      '--name',
      name,
      '--network',
      network,
      '--network-alias',
      deployment,
      ...runFlags(r, pod, c, configDir),
      c.image,
      ...(c.command ?? []),
      ...(c.args ?? []),
    ]);
    containers.push(name);
    return {
      name,
      url(port: string) {
        const containerPort = c.ports!.find((p) => p.name === port)!.containerPort;
        return `http://${docker(['port', name, `${containerPort}/tcp`]).split('\n')[0]}`;
      },
    };
  }

  async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
    const deadline = Date.now() + ms;
    let last: unknown;
    while (Date.now() < deadline) {
      try {
        const v = await fn();
        if (v !== undefined) return v;
      } catch (err) {
        last = err;
      }
      await new Promise((res) => setTimeout(res, 500));
    }
    throw new Error(`${what} did not happen within ${ms} ms (${String(last)})`);
  }

  /** Renders with `values`, starts redis + the three pods, waits for the gateway's /readyz. */
  async function deploy(values: string[]) {
    const redis = `redis-${id}`;
    const r = render(...KEYS, ...IMAGE_TAG, '--set', `redis.url=redis://${redis}:6379`, ...values);
    const configDir = mkdtempSync(path.join(tmpdir(), 'tg-helm-config-'));
    dirs.push(configDir);
    // Every file of the ConfigMap, as its volume would hold them (gateway and worker configs).
    for (const [file, text] of Object.entries(r.get('ConfigMap', 'tg-toolgate-config').data!)) {
      writeFileSync(path.join(configDir, file), text);
      chmodSync(path.join(configDir, file), 0o644);
    }
    chmodSync(configDir, 0o755);
    if (!containers.includes(redis)) {
      docker(['run', '-d', '--name', redis, '--network', network, 'toolgate/redis:7']);
      containers.push(redis);
    }
    const pods = Object.fromEntries(
      ['gateway', 'worker-fast', 'worker-sandbox'].map((d) => [
        d,
        start(r, `tg-toolgate-${d}`, configDir),
      ]),
    ) as Record<'gateway' | 'worker-fast' | 'worker-sandbox', Started>;
    const gateway = pods.gateway.url('http');
    const ready = await until('gateway /readyz with both workers', async () => {
      const res = await fetch(`${gateway}/readyz`);
      const body = (await res.json()) as { status: string; workers?: number };
      return res.status === 200 && body.workers === 2 ? body : undefined;
    });
    return { r, pods, gateway, ready };
  }

  async function call(gateway: string, tool: string, args: unknown) {
    const res = await fetch(`${gateway}/tools/${tool}/execute`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer assistant-key-0123456789abcdef',
        'content-type': 'application/json',
      },
      body: JSON.stringify(args),
    });
    return (await res.json()) as { status: string; result?: unknown; error?: unknown };
  }

  const teardown = (pods: Record<string, Started>) => {
    for (const p of Object.values(pods)) {
      spawnSync('docker', ['rm', '-f', p.name], { stdio: 'ignore' });
      containers.splice(containers.indexOf(p.name), 1);
    }
  };

  it('values-bwrap: probes answer, calls run on both pools, sandboxes run under bwrap as uid 10001', async () => {
    // The image the chart names for bwrap sandbox workers (cached by Docker after the first build).
    docker(
      [
        'build',
        '-q',
        '-f',
        path.join(ROOT, 'deploy/helm/images/worker-bwrap.Dockerfile'),
        '--build-arg',
        `WORKER_IMAGE=toolgate/worker:${TAG}`,
        '-t',
        BWRAP_IMAGE,
        BUILD_DIR,
      ],
      300_000,
    );
    ensureNetwork();
    const { pods, gateway, ready } = await deploy(['-f', `${CHART}/values-bwrap.yaml`]);
    expect(ready).toMatchObject({ status: 'ready', workers: 2 });
    // Each probe the pod spec declares answers 200 on the port it names.
    const r = render(...KEYS, ...IMAGE_TAG, '-f', `${CHART}/values-bwrap.yaml`);
    for (const [d, pod] of Object.entries(pods)) {
      const c = podSpec(r, `tg-toolgate-${d}`).containers[0]!;
      for (const probe of [c.livenessProbe, c.readinessProbe, c.startupProbe]) {
        const { path: p, port } = probe!.httpGet!;
        const res = await fetch(`${pod.url(String(port))}${p}`);
        expect(res.status, `${d} ${p}`).toBe(200);
      }
    }

    expect(await call(gateway, 'calculator', { expression: '2*(3+4)' })).toMatchObject({
      status: 'ok',
      result: 14,
    });
    const py = await call(gateway, 'run_python', {
      code: "import os\nopen('k8s.txt', 'w').write('hi')\nprint(open('k8s.txt').read(), os.getcwd(), os.getuid())",
    });
    expect(py, JSON.stringify(py)).toMatchObject({
      status: 'ok',
      result: { stdout: 'hi /workspace 10001\n', exitCode: 0 },
    });
    // The file tools reach the same workspace from the worker.
    expect(await call(gateway, 'file_read', { path: 'k8s.txt' })).toMatchObject({
      status: 'ok',
      result: { content: 'hi' },
    });
    // Inside, toolgate's own seccomp filter still refuses new namespaces.
    const shell = await call(gateway, 'run_shell', { command: 'unshare -U true; echo "rc=$?"' });
    expect(shell).toMatchObject({ status: 'ok', result: { stdout: 'rc=1\n' } });

    const logs = docker(['logs', pods['worker-sandbox'].name]);
    expect(logs).toContain('"driver":"bwrap"');

    // The workers ran every call above without a single client key in their environment.
    const envOf = (name: string) =>
      JSON.parse(docker(['inspect', '-f', '{{json .Config.Env}}', name])) as string[];
    const clientKeys = ['admin-key-0123456789abcdef', 'assistant-key-0123456789abcdef'];
    for (const d of ['worker-fast', 'worker-sandbox'] as const) {
      const env = envOf(pods[d].name).join('\n');
      for (const key of clientKeys) expect(env, d).not.toContain(key);
      expect(env, d).not.toMatch(/^TOOLGATE_(ADMIN|ASSISTANT)_KEY=/m);
    }
    expect(envOf(pods.gateway.name)).toContain(`TOOLGATE_ADMIN_KEY=${clientKeys[0]}`);
    // Metrics on the gateway's metrics port, not on its API port.
    expect((await fetch(`${gateway}/metrics`)).status).toBe(404);
    const metrics = await fetch(`${pods.gateway.url('metrics')}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('toolgate_calls_total');
    teardown(pods);
  }, 420_000);

  it('values-docker: sandboxes are containers of the host engine, workspaces at the same path on both sides', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'tg-helm-data-'));
    dirs.push(dataDir);
    ensureNetwork();
    const { pods, gateway } = await deploy([
      '-f',
      `${CHART}/values-docker.yaml`,
      '--set',
      `workers.sandbox.docker.dataDir=${dataDir}`,
      // No node label here.
      '--set-json',
      'workers.sandbox.nodeSelector={}',
    ]);
    const py = await call(gateway, 'run_python', {
      code: "import os\nopen('k8s.txt', 'w').write('hi')\nprint(os.getcwd(), os.getuid())",
    });
    expect(py, JSON.stringify(py)).toMatchObject({
      status: 'ok',
      result: { stdout: '/workspace 10001\n', exitCode: 0 },
    });
    const written = path.join(dataDir, 'workspaces', 'assistant', 'k8s.txt');
    expect(readFileSync(written, 'utf8')).toBe('hi');
    expect(docker(['logs', pods['worker-sandbox'].name])).toContain('"driver":"docker"');
    teardown(pods);
  }, 300_000);
  it('values-bwrap: without any one of seccomp Unconfined, procMount Unmasked, SETUID, SETGID, SETFCAP, bwrap cannot sandbox', () => {
    buildBwrapImage();
    const r = render(...KEYS, ...IMAGE_TAG, '-f', `${CHART}/values-bwrap.yaml`);
    const pod = podSpec(r, 'tg-toolgate-worker-sandbox');
    const c = pod.containers[0]!;
    // What the driver does: its start check (bwrap as root), then a sandbox as uid 10001 with
    // a user namespace of its own, a fresh /proc for its PID namespace, no further namespaces.
    const probe = [
      'sh',
      '-c',
      'bwrap --unshare-all --ro-bind / / true && setpriv --reuid=10001 --regid=10001 --clear-groups --inh-caps=-all -- ' +
        'bwrap --unshare-all --unshare-user --disable-userns --ro-bind / / --proc /proc --dev /dev --cap-drop ALL -- true',
    ];
    const sandboxes = (p: PodSpec, cont: Container) => {
      const args = ['run', '--rm', ...runFlags(r, p, cont, tmpdir(), false), BWRAP_IMAGE, ...probe];
      const out = spawnSync('docker', args, { encoding: 'utf8', timeout: 60_000 });
      return { ok: out.status === 0, stderr: out.stderr.trim() };
    };
    expect(sandboxes(pod, c)).toEqual({ ok: true, stderr: '' });

    const withoutPod = (key: string) => {
      const sc = { ...pod.securityContext };
      delete sc[key];
      return sandboxes({ ...pod, securityContext: sc }, c);
    };
    const withoutContainer = (change: (sc: Record<string, unknown>) => void) => {
      const sc = structuredClone(c.securityContext ?? {});
      change(sc);
      return sandboxes(pod, { ...c, securityContext: sc });
    };
    const withoutCap = (cap: string) =>
      withoutContainer((sc) => {
        const caps = sc.capabilities as { add: string[] };
        caps.add = caps.add.filter((x) => x !== cap);
      });
    expect(withoutPod('seccompProfile').stderr).toMatch(
      /No permissions to create new namespace|Operation not permitted/,
    );
    expect(withoutContainer((sc) => delete sc.procMount).stderr).toContain("Can't mount proc");
    expect(withoutCap('SETFCAP').stderr).toContain('setting up uid map');
    for (const cap of ['SETUID', 'SETGID']) {
      expect(withoutCap(cap).ok, cap).toBe(false);
    }
  }, 300_000);
});

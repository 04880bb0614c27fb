/**
 * The Helm chart (deploy/helm/toolgate), rendered by a real helm (test/deploy/helm-binary.ts,
 * no network) with the default values and with values-bwrap.yaml / values-docker.yaml. Every
 * object is validated against the Kubernetes, KEDA and Prometheus Operator schemas bundled in
 * kubernetes-models, and the test checks what an operator would notice: the config the pods
 * read loads in toolgate's own loader with the Secret's keys, probes hit /readyz and /healthz,
 * each worker pool consumes and scales on its own queue, sandbox workers reach only Redis and
 * DNS, and a bad values file fails at render time with a message that names the field.
 */
import { readFileSync } from 'node:fs';
import { Keys } from '@toolgate/calls';
import { ShardMap, parseConfig } from '@toolgate/config';
import { createLogger } from '@toolgate/log';
import type { ToolServices } from '@toolgate/registry';
import { createHttpServices, createToolRegistry } from '@toolgate/tools';
import { createWorker, type ToolWorker } from '@toolgate/worker';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  CHART,
  KEYS,
  ROOT,
  containerEnv,
  helm,
  podSpec,
  render,
  renderFails,
  type NetworkPolicyRule,
  type Rendered,
} from './helm-render.js';
import { unknownFields } from './helm-fields.js';
import { startStack, type Stack } from '../support/stack.js';

/** The kubernetes-models class of an object (core, KEDA, Prometheus Operator). */
async function modelFor(apiVersion: string, kind: string) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const path =
    group === 'keda.sh'
      ? `@kubernetes-models/keda/keda.sh/${version}/${kind}`
      : group === 'monitoring.coreos.com'
        ? `@kubernetes-models/prometheus-operator/monitoring.coreos.com/${version}/${kind}`
        : `kubernetes-models/${group ? `${group}/` : ''}${version}/${kind}`;
  const mod = (await import(path)) as Record<string, new (data: unknown) => { validate(): void }>;
  const model = mod[kind];
  if (!model) throw new Error(`no schema for ${apiVersion} ${kind}`);
  return model;
}

async function validateAll(r: Rendered): Promise<string[]> {
  const checked: string[] = [];
  for (const o of r.objects) {
    const Model = await modelFor(o.apiVersion, o.kind);
    try {
      new Model(o).validate();
    } catch (err) {
      throw new Error(`${o.kind} ${o.metadata.name}: ${(err as Error).message}`, { cause: err });
    }
    checked.push(`${o.kind}/${o.metadata.name}`);
  }
  return checked;
}

/** The config a container loads: the ConfigMap's file, its env, and `--queues` as the CLI maps it. */
function loadedConfig(r: Rendered, deployment: string) {
  const c = podSpec(r, deployment).containers[0]!;
  const env = containerEnv(r, c);
  // The gateway reads toolgate.yaml; the workers worker.yaml, the same without client keys.
  const name = deployment.endsWith('-gateway') ? 'toolgate.yaml' : 'worker.yaml';
  expect(env.TOOLGATE_CONFIG).toBe(`/etc/toolgate/${name}`);
  const file = r.get('ConfigMap', 'tg-toolgate-config').data![name]!;
  expect(c.volumeMounts).toContainEqual(
    expect.objectContaining({ name: 'config', mountPath: '/etc/toolgate' }),
  );
  const queues = c.args?.indexOf('--queues') ?? -1;
  if (queues >= 0) env.TOOLGATE_WORKER_QUEUES = c.args![queues + 1]!;
  return parseConfig(parseYaml(file), env);
}

const DEPLOYMENTS = [
  'tg-toolgate-gateway',
  'tg-toolgate-worker-fast',
  'tg-toolgate-worker-sandbox',
];

describe('helm chart deploy/helm/toolgate', () => {
  let defaults: Rendered;
  let bwrap: Rendered;
  let docker: Rendered;

  beforeAll(() => {
    defaults = render(...KEYS);
    bwrap = render('-f', `${CHART}/values-bwrap.yaml`, ...KEYS);
    docker = render('-f', `${CHART}/values-docker.yaml`, ...KEYS);
  });

  it('renders every object valid against the Kubernetes, KEDA and Prometheus Operator schemas', async () => {
    for (const r of [defaults, bwrap, docker]) {
      // Closed types: no field the API would drop (a misspelt one, or one at the wrong level).
      expect(unknownFields(r.objects)).toEqual([]);
      const checked = await validateAll(r);
      expect(checked).toEqual(
        expect.arrayContaining([
          ...DEPLOYMENTS.map((d) => `Deployment/${d}`),
          'Service/tg-toolgate-gateway',
          'Service/tg-toolgate-gateway-metrics',
          'HorizontalPodAutoscaler/tg-toolgate-gateway',
          'PodDisruptionBudget/tg-toolgate-gateway',
          'PodDisruptionBudget/tg-toolgate-worker-fast',
          'PodDisruptionBudget/tg-toolgate-worker-sandbox',
          'ScaledObject/tg-toolgate-worker-fast',
          'ScaledObject/tg-toolgate-worker-sandbox',
          'ServiceMonitor/tg-toolgate-gateway',
          'ServiceMonitor/tg-toolgate-worker-fast',
          'ServiceMonitor/tg-toolgate-worker-sandbox',
          'ConfigMap/tg-toolgate-config',
          'ConfigMap/tg-toolgate-dashboard',
          'Secret/tg-toolgate',
          'NetworkPolicy/tg-toolgate-gateway',
          'NetworkPolicy/tg-toolgate-worker-fast',
          'NetworkPolicy/tg-toolgate-worker-sandbox',
        ]),
      );
    }
  });

  it('renders an Ingress only when asked, routing the public paths and not /metrics or the probes', async () => {
    expect(defaults.objects.filter((o) => o.kind === 'Ingress')).toEqual([]);
    const r = render(
      ...KEYS,
      '--set',
      'gateway.ingress.enabled=true',
      '--set',
      'gateway.ingress.className=nginx',
      '--set',
      'gateway.ingress.host=tools.example.com',
      '--set',
      'gateway.ingress.tls[0].secretName=toolgate-tls',
      '--set',
      'gateway.ingress.tls[0].hosts[0]=tools.example.com',
    );
    const ingresses = r.objects.filter((o) => o.kind === 'Ingress');
    expect(unknownFields(ingresses)).toEqual([]);
    expect(await validateAll({ ...r, objects: ingresses })).toEqual([
      'Ingress/tg-toolgate-gateway',
    ]);
    const ingress = r.get<{
      ingressClassName: string;
      tls: { secretName: string; hosts: string[] }[];
      rules: {
        host: string;
        http: {
          paths: {
            path: string;
            pathType: string;
            backend: { service: { name: string; port: { name: string } } };
          }[];
        };
      }[];
    }>('Ingress', 'tg-toolgate-gateway');
    expect(ingress.spec.ingressClassName).toBe('nginx');
    expect(ingress.spec.tls).toEqual([
      { secretName: 'toolgate-tls', hosts: ['tools.example.com'] },
    ]);
    expect(ingress.spec.rules.map((rule) => rule.host)).toEqual(['tools.example.com']);
    const paths = ingress.spec.rules[0]!.http.paths;
    expect(paths.map((p) => `${p.pathType} ${p.path}`)).toEqual([
      'Prefix /v1',
      'Prefix /tools',
      'Prefix /mcp',
      'Prefix /console',
      'Prefix /admin/queues',
    ]);
    // Each goes to the gateway Service's named port, which exists.
    const service = r.get<{ ports: { name: string }[] }>('Service', 'tg-toolgate-gateway');
    for (const p of paths) {
      expect(p.backend.service.name).toBe('tg-toolgate-gateway');
      expect(service.spec.ports.map((port) => port.name)).toContain(p.backend.service.port.name);
    }
    // No host: the rule serves any host, and the object is still valid.
    const anyHost = render(...KEYS, '--set', 'gateway.ingress.enabled=true');
    const plain = anyHost.objects.filter((o) => o.kind === 'Ingress');
    expect(unknownFields(plain)).toEqual([]);
    await validateAll({ ...anyHost, objects: plain });
    const rules = anyHost.get<{ rules: { host?: string; http: { paths: unknown[] } }[] }>(
      'Ingress',
      'tg-toolgate-gateway',
    ).spec.rules;
    expect(rules.map((rule) => [rule.host, rule.http.paths.length])).toEqual([[undefined, 5]]);
    // A path that is not a path is refused by the values schema.
    expect(
      renderFails(
        ...KEYS,
        '--set',
        'gateway.ingress.enabled=true',
        '--set',
        'gateway.ingress.paths[0]=v1',
      ),
    ).toMatch(/paths/);
  });

  it('would catch a misspelt field (the closed-type check is not vacuous)', () => {
    const objects = structuredClone(defaults.objects);
    const gateway = objects.find(
      (o) => o.metadata.name === 'tg-toolgate-gateway' && o.kind === 'Deployment',
    )!;
    const spec = gateway.spec as { template: { spec: { containers: Record<string, unknown>[] } } };
    spec.template.spec.containers[0]!.readinesProbe = {
      httpGet: { path: '/readyz', port: 'http' },
    };
    expect(unknownFields(objects)).toEqual([
      expect.stringMatching(
        /^Deployment\/tg-toolgate-gateway: .*'"readinesProbe"' does not exist in type 'IContainer'/,
      ),
    ]);
  });

  it('passes helm lint --strict with each values file', () => {
    for (const values of [
      [],
      ['-f', `${CHART}/values-bwrap.yaml`],
      ['-f', `${CHART}/values-docker.yaml`],
    ]) {
      const { status, stdout } = helm(['lint', CHART, '--strict', ...values, ...KEYS]);
      expect(stdout).toContain('0 chart(s) failed');
      expect(status).toBe(0);
    }
  });

  it('gives every pod a config that toolgate loads, with the client keys from the Secret', () => {
    for (const r of [defaults, bwrap, docker]) {
      for (const d of DEPLOYMENTS) {
        const config = loadedConfig(r, d);
        expect(config.clients.map((c) => [c.id, c.admin])).toEqual([
          ['ops', true],
          ['assistant', false],
        ]);
        expect(config.redis.url).toBe('redis://redis:6379');
        expect(config.server.port).toBe(8080);
      }
    }
    // The keys themselves never reach the ConfigMap.
    const file = defaults.get('ConfigMap', 'tg-toolgate-config').data!['toolgate.yaml']!;
    expect(file).not.toContain('admin-key-0123456789abcdef');
    expect(file).toContain('${TOOLGATE_ADMIN_KEY}');
  });

  it('gives worker pods no client key, neither in their env nor in their config file', () => {
    const secretValues = ['admin-key-0123456789abcdef', 'assistant-key-0123456789abcdef'];
    // A Redis password in the Secret too: the workers still need that one.
    const withRedisPassword = render(
      ...KEYS,
      '--set',
      'secretEnv.REDIS_PASSWORD=redis-password',
      '--set-string',
      'secret.values.redis-password=redis-password-0123',
      '--set-string',
      'redis.url=redis://:${REDIS_PASSWORD}@redis:6379',
    );
    for (const r of [defaults, bwrap, docker, withRedisPassword]) {
      const workerFile = r.get('ConfigMap', 'tg-toolgate-config').data!['worker.yaml']!;
      for (const d of DEPLOYMENTS.slice(1)) {
        const env = containerEnv(r, podSpec(r, d).containers[0]!);
        expect(Object.keys(env), d).not.toContain('TOOLGATE_ADMIN_KEY');
        expect(Object.keys(env), d).not.toContain('TOOLGATE_ASSISTANT_KEY');
        for (const value of secretValues) expect(Object.values(env), d).not.toContain(value);
        // Same clients, scopes and limits as the gateway's, none of them with a usable key.
        const worker = loadedConfig(r, d);
        const gateway = loadedConfig(r, 'tg-toolgate-gateway');
        expect(worker.clients.map(({ keySha256: _, ...c }) => c)).toEqual(
          gateway.clients.map(({ keySha256: _, ...c }) => c),
        );
        for (const c of worker.clients) expect(c.keySha256).toBe('0'.repeat(64));
      }
      expect(workerFile).not.toMatch(/\$\{TOOLGATE_(ADMIN|ASSISTANT)_KEY\}/);
      // The gateway still reads both keys from the Secret.
      const gatewayEnv = containerEnv(r, podSpec(r, 'tg-toolgate-gateway').containers[0]!);
      expect(gatewayEnv).toMatchObject({
        TOOLGATE_ADMIN_KEY: secretValues[0],
        TOOLGATE_ASSISTANT_KEY: secretValues[1],
      });
    }
    for (const d of DEPLOYMENTS) {
      const env = containerEnv(withRedisPassword, podSpec(withRedisPassword, d).containers[0]!);
      expect(env.REDIS_PASSWORD, d).toBe('redis-password-0123');
      expect(loadedConfig(withRedisPassword, d).redis.url).toBe(
        'redis://:redis-password-0123@redis:6379',
      );
    }
  });

  it('runs one worker pool per queue with its own concurrency', () => {
    const fast = loadedConfig(defaults, 'tg-toolgate-worker-fast');
    expect(fast.worker.queues).toEqual(['fast']);
    expect(fast.worker.concurrency).toBe(32);
    const sandbox = loadedConfig(defaults, 'tg-toolgate-worker-sandbox');
    expect(sandbox.worker.queues).toEqual(['sandbox']);
    expect(sandbox.worker.sandboxConcurrency).toBe(4);
    for (const d of DEPLOYMENTS.slice(1)) {
      expect(podSpec(defaults, d).containers[0]!.command).toEqual(['toolgate', 'worker']);
    }
    expect(podSpec(defaults, 'tg-toolgate-gateway').containers[0]!.command).toEqual([
      'toolgate',
      'gateway',
    ]);
  });

  it('probes the gateway on /readyz and /healthz, the workers on /healthz of their metrics port', () => {
    const g = podSpec(defaults, 'tg-toolgate-gateway').containers[0]!;
    expect(g.ports).toEqual([
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'metrics', containerPort: 9092, protocol: 'TCP' },
    ]);
    expect(g.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: 'http' });
    expect(g.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'http' });
    for (const d of DEPLOYMENTS.slice(1)) {
      const w = podSpec(defaults, d).containers[0]!;
      expect(w.ports).toEqual([{ name: 'metrics', containerPort: 9091, protocol: 'TCP' }]);
      expect(w.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
      expect(w.readinessProbe?.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    }
    // The port the probes name is the one the config makes the worker listen on.
    expect(loadedConfig(defaults, 'tg-toolgate-worker-fast').worker.metricsPort).toBe(9091);
  });

  it('selects the right pods from every Service, PDB, HPA, ScaledObject and ServiceMonitor', () => {
    const podLabels = (d: string) =>
      defaults.get<{ template: { metadata: { labels: Record<string, string> } } }>('Deployment', d)
        .spec.template.metadata.labels;
    const matches = (selector: Record<string, string>, d: string) =>
      Object.entries(selector).every(([k, v]) => podLabels(d)[k] === v);
    const only = (selector: Record<string, string>) =>
      DEPLOYMENTS.filter((d) => matches(selector, d));

    const svc = defaults.get<{ selector: Record<string, string> }>(
      'Service',
      'tg-toolgate-gateway',
    );
    expect(only(svc.spec.selector)).toEqual(['tg-toolgate-gateway']);
    const pdb = defaults.get<{ selector: { matchLabels: Record<string, string> } }>(
      'PodDisruptionBudget',
      'tg-toolgate-gateway',
    );
    expect(only(pdb.spec.selector.matchLabels)).toEqual(['tg-toolgate-gateway']);
    // Each worker pool's budget covers its own pods only: a drain of one pool never counts the
    // other's pods as available.
    for (const pool of ['worker-fast', 'worker-sandbox']) {
      const budget = defaults.get<{
        maxUnavailable: number;
        selector: { matchLabels: Record<string, string> };
      }>('PodDisruptionBudget', `tg-toolgate-${pool}`);
      expect(only(budget.spec.selector.matchLabels)).toEqual([`tg-toolgate-${pool}`]);
      expect(budget.spec.maxUnavailable).toBe(1);
    }
    const hpa = defaults.get<{
      scaleTargetRef: { kind: string; name: string };
      metrics: { resource: { name: string } }[];
    }>('HorizontalPodAutoscaler', 'tg-toolgate-gateway');
    expect(hpa.spec.scaleTargetRef).toMatchObject({
      kind: 'Deployment',
      name: 'tg-toolgate-gateway',
    });
    expect(hpa.spec.metrics.map((m) => m.resource.name)).toEqual(['cpu']);
    // KEDA owns the workers' replica count (an HPA of its own); Helm must not reset it.
    for (const d of DEPLOYMENTS) {
      expect(defaults.get('Deployment', d).spec).not.toHaveProperty('replicas');
    }

    for (const queue of ['fast', 'sandbox']) {
      const d = `tg-toolgate-worker-${queue}`;
      const so = defaults.get<{ scaleTargetRef: { name: string } }>('ScaledObject', d);
      expect(so.spec.scaleTargetRef.name).toBe(d);
      const workerSvc = defaults.get<{ selector: Record<string, string>; clusterIP: string }>(
        'Service',
        d,
      );
      expect(only(workerSvc.spec.selector)).toEqual([d]);
      const sm = defaults.get<{
        selector: { matchLabels: Record<string, string> };
        endpoints: { port: string; path: string }[];
      }>('ServiceMonitor', d);
      expect(sm.spec.selector.matchLabels).toEqual(workerSvc.spec.selector);
      expect(sm.spec.endpoints).toEqual([
        expect.objectContaining({ port: 'metrics', path: '/metrics', honorLabels: true }),
      ]);
    }
    // The gateway's metrics: its own container port, behind a headless Service of its own (the
    // gateway Service may be a LoadBalancer and the Ingress routes to it: never /metrics there).
    const gsm = defaults.get<{
      selector: { matchLabels: Record<string, string> };
      endpoints: { port: string; path: string; relabelings: unknown[] }[];
    }>('ServiceMonitor', 'tg-toolgate-gateway');
    expect(gsm.spec.endpoints).toEqual([
      expect.objectContaining({ port: 'metrics', path: '/metrics', honorLabels: true }),
    ]);
    // Scraped under the gateway's job name, which the ScaledObjects' queries select.
    expect(gsm.spec.endpoints[0]!.relabelings).toEqual([
      { action: 'replace', targetLabel: 'job', replacement: 'tg-toolgate-gateway' },
    ]);
    const metricsSvc = defaults.get<{
      clusterIP: string;
      selector: Record<string, string>;
      ports: { name: string; port: number; targetPort: string }[];
    }>('Service', 'tg-toolgate-gateway-metrics');
    const metricsSvcLabels = defaults.objects.find(
      (o) => o.kind === 'Service' && o.metadata.name === 'tg-toolgate-gateway-metrics',
    )!.metadata.labels as Record<string, string>;
    expect(
      Object.entries(gsm.spec.selector.matchLabels).every(([k, v]) => metricsSvcLabels[k] === v),
    ).toBe(true);
    const gatewaySvcLabels = defaults.objects.find(
      (o) => o.kind === 'Service' && o.metadata.name === 'tg-toolgate-gateway',
    )!.metadata.labels as Record<string, string>;
    expect(
      Object.entries(gsm.spec.selector.matchLabels).every(([k, v]) => gatewaySvcLabels[k] === v),
    ).toBe(false);
    expect(metricsSvc.spec.clusterIP).toBe('None');
    expect(only(metricsSvc.spec.selector)).toEqual(['tg-toolgate-gateway']);
    expect(metricsSvc.spec.ports).toEqual([
      expect.objectContaining({ name: 'metrics', port: 9092, targetPort: 'metrics' }),
    ]);
    const gatewayPod = podSpec(defaults, 'tg-toolgate-gateway').containers[0]!;
    expect(gatewayPod.ports).toEqual([
      expect.objectContaining({ name: 'http', containerPort: 8080 }),
      expect.objectContaining({ name: 'metrics', containerPort: 9092 }),
    ]);
    // The config the gateway loads serves them there, apart from the API port.
    expect(loadedConfig(defaults, 'tg-toolgate-gateway').server).toMatchObject({
      port: 8080,
      metricsPort: 9092,
    });
  });

  it('scales each worker pool on its own queue: waiting (wait list + prioritized) and running calls', () => {
    for (const [queue, perReplica, min] of [
      ['fast', '32', 1],
      ['sandbox', '4', 0],
    ] as const) {
      const so = defaults.get<{
        minReplicaCount: number;
        triggers: { type: string; metadata: Record<string, string> }[];
      }>('ScaledObject', `tg-toolgate-worker-${queue}`);
      expect(so.spec.minReplicaCount).toBe(min);
      expect(so.spec.triggers).toHaveLength(1);
      const [trigger] = so.spec.triggers;
      expect(trigger!.type).toBe('prometheus');
      expect(trigger!.metadata.threshold).toBe(perReplica);
      // The gateway's gauge already counts prioritized jobs as waiting; every gateway reports
      // the same Redis numbers, so the query takes max across them, not sum.
      expect(trigger!.metadata.query).toBe(
        `sum(max by (state) (toolgate_queue_jobs{namespace="tools",job="tg-toolgate-gateway",queue="${queue}",state=~"waiting|active"}))`,
      );
    }
    // The ServiceMonitor that gives Prometheus those series scrapes that very Service.
    const svc = defaults.get<{ ports: { name: string }[] }>('Service', 'tg-toolgate-gateway');
    expect(svc.spec.ports.map((p) => p.name)).toEqual(['http']);
    // The fast pool cannot go to zero: /readyz needs a live worker, or no call gets in.
    expect(renderFails(...KEYS, '--set', 'workers.fast.autoscaling.minReplicas=0')).toMatch(
      /workers\.fast\.autoscaling\.minReplicas|minReplicas/,
    );
  });

  it('lets sandbox workers reach only Redis, DNS and the gateway; the gateway takes traffic on its port only', () => {
    const policy = (name: string) =>
      defaults.get<{
        policyTypes: string[];
        ingress: NetworkPolicyRule[];
        egress: NetworkPolicyRule[];
      }>('NetworkPolicy', name).spec;
    const ports = (rules: NetworkPolicyRule[]) =>
      rules.flatMap((r) => (r.ports ?? []).map((p) => `${p.protocol}/${p.port}`)).sort();

    const sandbox = policy('tg-toolgate-worker-sandbox');
    expect(sandbox.policyTypes).toEqual(['Ingress', 'Egress']);
    // 8080: the gateway's API port, for code mode's nested calls (the next test).
    expect(ports(sandbox.egress)).toEqual([
      'TCP/26379',
      'TCP/53',
      'TCP/6379',
      'TCP/8080',
      'UDP/53',
    ]);
    // Every egress rule is port-bound: no rule opens all ports to anywhere.
    expect(sandbox.egress.every((r) => (r.ports ?? []).length > 0)).toBe(true);
    expect(ports(sandbox.ingress)).toEqual(['TCP/9091']);

    const gateway = policy('tg-toolgate-gateway');
    expect(ports(gateway.ingress)).toEqual(['TCP/8080', 'TCP/9092']);
    expect(ports(gateway.egress)).toEqual(['TCP/26379', 'TCP/53', 'TCP/6379', 'UDP/53']);

    // Fast workers add HTTP(S) for http_get, to public addresses only.
    const fast = policy('tg-toolgate-worker-fast');
    expect(ports(fast.egress)).toEqual([
      'TCP/26379',
      'TCP/443',
      'TCP/53',
      'TCP/6379',
      'TCP/80',
      'UDP/53',
    ]);
    const http = fast.egress.find((r) => r.ports?.some((p) => p.port === 443))!;
    expect(http.to).toEqual([
      {
        ipBlock: expect.objectContaining({
          cidr: '0.0.0.0/0',
          except: expect.arrayContaining([
            '10.0.0.0/8',
            '172.16.0.0/12',
            '192.168.0.0/16',
            '169.254.0.0/16',
          ]),
        }),
      },
    ]);
  });

  it("sends code mode's nested calls from every worker pool to the gateway Service, and lets sandbox workers reach its API port only", async () => {
    type Policy = { ingress: NetworkPolicyRule[]; egress: NetworkPolicyRule[] };
    type Peer = { podSelector?: { matchLabels: Record<string, string> } };
    const labels = (r: Rendered, kind: string, name: string) =>
      kind === 'Service'
        ? r.get<{ selector: Record<string, string> }>('Service', name).spec.selector
        : r.get<{ template: { metadata: { labels: Record<string, string> } } }>(kind, name).spec
            .template.metadata.labels;
    const selects = (peer: Peer, podLabels: Record<string, string>) =>
      Object.entries(peer.podSelector?.matchLabels ?? { none: '' }).every(
        ([k, v]) => podLabels[k] === v,
      );
    for (const r of [defaults, bwrap, docker]) {
      const service = r.get<{ ports: { port: number; targetPort: string }[] }>(
        'Service',
        'tg-toolgate-gateway',
      );
      for (const d of DEPLOYMENTS.slice(1)) {
        // Not the config's default, 127.0.0.1, where no gateway listens in a worker pod.
        expect(loadedConfig(r, d).codeMode.gatewayUrl, d).toBe(
          `http://${service.metadata.name}.tools.svc:${service.spec.ports[0]!.port}`,
        );
      }
      // The sandbox pool's egress reaches the gateway pods on the API port and no other.
      const gatewayPods = labels(r, 'Service', 'tg-toolgate-gateway');
      const egress = r
        .get<Policy>('NetworkPolicy', 'tg-toolgate-worker-sandbox')
        .spec.egress.filter((rule) =>
          (rule.to as Peer[] | undefined)?.some((p) => selects(p, gatewayPods)),
        );
      expect(egress.flatMap((rule) => rule.ports)).toEqual([{ protocol: 'TCP', port: 8080 }]);
    }

    // A gateway open only to an ingress controller still admits the sandbox workers, on 8080.
    const narrowed = render(
      ...KEYS,
      '--set',
      'networkPolicy.gateway.from[0].namespaceSelector.matchLabels.name=ingress',
    );
    const sandboxPods = labels(narrowed, 'Deployment', 'tg-toolgate-worker-sandbox');
    const fastPods = labels(narrowed, 'Deployment', 'tg-toolgate-worker-fast');
    const ingress = narrowed.get<Policy>('NetworkPolicy', 'tg-toolgate-gateway').spec.ingress;
    const admitting = (pods: Record<string, string>) =>
      ingress.filter((rule) => (rule.from as Peer[] | undefined)?.some((p) => selects(p, pods)));
    expect(admitting(sandboxPods).flatMap((rule) => rule.ports)).toEqual([
      { protocol: 'TCP', port: 8080 },
    ]);
    expect(admitting(fastPods)).toEqual([]);
    await validateAll(narrowed);

    // Overridable: codeMode.gatewayUrl, or the config's own codeMode.gatewayUrl.
    const own = render(...KEYS, '--set', 'codeMode.gatewayUrl=http://gw.example:9000');
    const fromConfig = render(
      ...KEYS,
      '--set',
      'config.codeMode.gatewayUrl=http://gw.internal:8080',
    );
    for (const d of DEPLOYMENTS.slice(1)) {
      expect(loadedConfig(own, d).codeMode.gatewayUrl).toBe('http://gw.example:9000');
      expect(loadedConfig(fromConfig, d).codeMode.gatewayUrl).toBe('http://gw.internal:8080');
    }
    expect(renderFails(...KEYS, '--set', 'codeMode.gatewayUrl=gateway:8080')).toMatch(
      /codeMode\.gatewayUrl|gatewayUrl/,
    );
  });

  it('gives bwrap sandbox pods a user namespace, unmasked /proc, no runtime seccomp/AppArmor veto, no SYS_ADMIN', () => {
    for (const r of [defaults, bwrap]) {
      const pod = podSpec(r, 'tg-toolgate-worker-sandbox');
      const c = pod.containers[0]!;
      expect(loadedConfig(r, 'tg-toolgate-worker-sandbox').sandbox.driver).toBe('bwrap');
      expect(c.image).toBe('toolgate/worker-bwrap:local');
      expect(pod.hostUsers).toBe(false);
      expect(pod.securityContext).toMatchObject({
        seccompProfile: { type: 'Unconfined' },
        appArmorProfile: { type: 'Unconfined' },
      });
      expect(c.securityContext).toMatchObject({
        procMount: 'Unmasked',
        allowPrivilegeEscalation: false,
        capabilities: {
          drop: ['ALL'],
          add: ['SETUID', 'SETGID', 'SETFCAP', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER'],
        },
      });
      expect(c.securityContext).not.toHaveProperty('privileged');
      expect(pod.volumes?.some((v) => v.hostPath)).toBe(false);
    }
    // The fast pool needs none of that.
    const fast = podSpec(bwrap, 'tg-toolgate-worker-fast');
    expect(fast.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(fast.containers[0]!.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
  });

  it('gives docker sandbox pods the node engine socket and the data directory at the same path as on the node', () => {
    const pod = podSpec(docker, 'tg-toolgate-worker-sandbox');
    const c = pod.containers[0]!;
    const config = loadedConfig(docker, 'tg-toolgate-worker-sandbox');
    expect(config.sandbox.driver).toBe('docker');
    expect(c.image).toBe('toolgate/worker:local');
    const mount = (name: string) => c.volumeMounts!.find((m) => m.name === name)!.mountPath;
    const hostPath = (name: string) => pod.volumes!.find((v) => v.name === name)!.hostPath!.path;
    expect(hostPath('docker-sock')).toBe('/var/run/docker.sock');
    expect(mount('docker-sock')).toBe('/var/run/docker.sock');
    expect(config.sandbox.docker.socketPath).toBe('/var/run/docker.sock');
    // The engine resolves workspace bind mounts on the node: same path inside and out.
    expect(hostPath('data')).toBe('/var/lib/toolgate');
    expect(mount('data')).toBe('/var/lib/toolgate');
    expect(config.sandbox.workspacesRoot).toBe('/var/lib/toolgate/workspaces');
    expect(config.sandbox.stateDir).toBe('/var/lib/toolgate/sandbox');
    expect(pod.hostUsers).toBe(true);
    expect(pod.securityContext).toMatchObject({ runAsUser: 0 });
  });

  it('runs without KEDA, the Prometheus Operator and NetworkPolicies when they are off', async () => {
    const plain = render(
      ...KEYS,
      '--set',
      'keda.enabled=false',
      '--set',
      'metrics.serviceMonitor.enabled=false',
      '--set',
      'networkPolicy.enabled=false',
    );
    const kinds = new Set(plain.objects.map((o) => o.kind));
    for (const kind of ['ScaledObject', 'ServiceMonitor', 'NetworkPolicy'])
      expect(kinds).not.toContain(kind);
    // Fixed replica counts instead.
    expect(plain.get('Deployment', 'tg-toolgate-worker-fast').spec.replicas).toBe(2);
    expect(plain.get('Deployment', 'tg-toolgate-worker-sandbox').spec.replicas).toBe(1);
    await validateAll(plain);
  });

  it('ships the Grafana dashboard for the sidecar, identical to deploy/grafana/dashboards/toolgate.json', () => {
    const original = readFileSync(`${ROOT}deploy/grafana/dashboards/toolgate.json`, 'utf8');
    // The chart's copy (helm reads no file outside the chart) must not drift from the original.
    expect(readFileSync(`${CHART}/dashboards/toolgate.json`, 'utf8')).toBe(original);
    const cm = defaults.get('ConfigMap', 'tg-toolgate-dashboard');
    expect(cm.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(JSON.parse(cm.data!['toolgate.json']!)).toEqual(JSON.parse(original));
  });

  it('passes redis.sentinel and redis.cluster through to the config, and refuses more than one', () => {
    const file = (r: Rendered) =>
      parseYaml(r.get('ConfigMap', 'tg-toolgate-config').data!['toolgate.yaml']!) as {
        redis: Record<string, unknown>;
      };
    const sentinel = render(
      ...KEYS,
      '--set',
      'redis.sentinel.name=mymaster',
      '--set',
      'redis.sentinel.nodes={s-0:26379,s-1:26379,s-2:26379}',
      '--set',
      'redis.sentinel.password=${REDIS_SENTINEL_PASSWORD}',
      // The password from the Secret, like the client keys.
      '--set',
      'secretEnv.REDIS_SENTINEL_PASSWORD=redis-password',
      '--set-string',
      'secret.values.redis-password=sentinel-secret',
    );
    expect(file(sentinel).redis).toEqual({
      prefix: 'toolgate',
      sentinel: {
        name: 'mymaster',
        nodes: ['s-0:26379', 's-1:26379', 's-2:26379'],
        password: '${REDIS_SENTINEL_PASSWORD}',
      },
    });
    // toolgate's own loader takes what the pods get.
    for (const d of DEPLOYMENTS) {
      const { redis } = loadedConfig(sentinel, d);
      expect(redis.url).toBeUndefined();
      expect(redis.sentinel).toMatchObject({ name: 'mymaster', password: 'sentinel-secret' });
    }
    const cluster = render(
      ...KEYS,
      '--set',
      'redis.cluster.nodes={c-0:6379,c-1:6379}',
      '--set',
      'redis.tls.servername=redis.example',
    );
    expect(file(cluster).redis).toEqual({
      prefix: 'toolgate',
      cluster: { nodes: ['c-0:6379', 'c-1:6379'] },
      tls: { servername: 'redis.example' },
    });
    const { redis } = loadedConfig(cluster, 'tg-toolgate-worker-sandbox');
    expect(redis.cluster?.nodes).toEqual(['c-0:6379', 'c-1:6379']);
    expect(redis.tls).toMatchObject({ servername: 'redis.example' });
    // The queue keys docs/kubernetes.md names for Cluster mode: the prefix is hash-tagged.
    // BullMQ's keys carry the same prefix: `{toolgate}:sandbox:prioritized` stays on one slot.
    expect(Keys.for(redis).queuePrefix).toBe('{toolgate}');
    expect(Keys.for(loadedConfig(defaults, DEPLOYMENTS[0]!).redis).queuePrefix).toBe('toolgate');

    expect(
      renderFails(
        ...KEYS,
        '--set',
        'redis.url=redis://r:6379',
        '--set',
        'redis.cluster.nodes={c-0:6379}',
      ),
    ).toContain(
      'set only one of redis.url, redis.sentinel, redis.cluster (got redis.url and redis.cluster)',
    );
    expect(renderFails(...KEYS, '--set', 'redis.sentinel.name=mymaster')).toContain(
      "redis.sentinel needs name (the master's name) and nodes",
    );
  });

  it('refuses to render without the keys the pods read, and takes an existing Secret instead', () => {
    expect(renderFails()).toContain(
      'secret.values.admin-key is not set (secretEnv.TOOLGATE_ADMIN_KEY reads it)',
    );
    const existing = render('--set', 'secret.existingSecret=toolgate-keys');
    expect(existing.objects.some((o) => o.kind === 'Secret')).toBe(false);
    const env = podSpec(existing, 'tg-toolgate-gateway').containers[0]!.env!;
    expect(env.find((e) => e.name === 'TOOLGATE_ADMIN_KEY')?.valueFrom?.secretKeyRef).toEqual({
      name: 'toolgate-keys',
      key: 'admin-key',
    });
  });

  it('rejects values outside the schema (values.schema.json) with the field named', () => {
    expect(renderFails(...KEYS, '--set', 'workers.sandbox.driver=podman')).toMatch(/driver/);
    expect(renderFails(...KEYS, '--set', 'redis.prefix=a:b')).toMatch(/prefix/);
  });

  describe('with redis.shards (values-shards.yaml: three Redis masters)', () => {
    const SHARDS = ['-f', `${CHART}/values-shards.yaml`];
    /** values-shards.yaml's list with its third shard replaced (helm's --set cannot drop a field). */
    const shardList = (third: Record<string, unknown>, ...more: Record<string, unknown>[]) => [
      '--set-json',
      `redis.shards=${JSON.stringify([
        { id: 's0', url: 'redis://redis-s0:6379', home: true },
        { id: 's1', url: 'redis://redis-s1:6379' },
        third,
        ...more,
      ])}`,
    ];
    let sharded: Rendered;
    let shardedBwrap: Rendered;
    let shardedDocker: Rendered;

    beforeAll(() => {
      sharded = render(...SHARDS, ...KEYS);
      shardedBwrap = render('-f', `${CHART}/values-bwrap.yaml`, ...SHARDS, ...KEYS);
      shardedDocker = render('-f', `${CHART}/values-docker.yaml`, ...SHARDS, ...KEYS);
    });

    it('renders valid objects and passes helm lint --strict with each driver', async () => {
      for (const r of [sharded, shardedBwrap, shardedDocker]) {
        expect(unknownFields(r.objects)).toEqual([]);
        expect(await validateAll(r)).toEqual(
          expect.arrayContaining([
            'ScaledObject/tg-toolgate-worker-fast',
            'ScaledObject/tg-toolgate-worker-sandbox',
          ]),
        );
      }
      for (const driver of ['values-bwrap.yaml', 'values-docker.yaml']) {
        const { status, stdout } = helm([
          'lint',
          CHART,
          '--strict',
          '-f',
          `${CHART}/${driver}`,
          ...SHARDS,
          ...KEYS,
        ]);
        expect(stdout).toContain('0 chart(s) failed');
        expect(status).toBe(0);
      }
    });

    it('gives every pod the shards instead of a Redis url, and each pod puts a client on the same shard', () => {
      const file = parseYaml(
        sharded.get('ConfigMap', 'tg-toolgate-config').data!['toolgate.yaml']!,
      ) as { redis: Record<string, unknown> };
      expect(file.redis).toEqual({
        prefix: 'toolgate',
        shards: [
          { id: 's0', url: 'redis://redis-s0:6379', home: true },
          { id: 's1', url: 'redis://redis-s1:6379' },
          { id: 's2', url: 'redis://redis-s2:6379' },
        ],
      });
      const placed = new Set<string>();
      for (const r of [sharded, shardedBwrap, shardedDocker]) {
        for (const d of DEPLOYMENTS) {
          // Neither the config nor the env names a single Redis: the loader refuses both at once.
          expect(Object.keys(containerEnv(r, podSpec(r, d).containers[0]!)), d).not.toContain(
            'REDIS_URL',
          );
          const config = loadedConfig(r, d);
          expect(config.redis.url, d).toBeUndefined();
          const map = new ShardMap(config);
          expect(map.list.map((s) => [s.id, s.home, s.redis.url, s.redis.prefix])).toEqual([
            ['s0', true, 'redis://redis-s0:6379', 'toolgate'],
            ['s1', false, 'redis://redis-s1:6379', 'toolgate'],
            ['s2', false, 'redis://redis-s2:6379', 'toolgate'],
          ]);
          // Pinned, and hashed: a gateway and the workers must agree on where a client lives.
          expect(map.of('assistant').id, d).toBe('s1');
          placed.add(map.of('ops').id);
        }
      }
      expect(placed.size).toBe(1);
      // The workers' copy keeps each client's shard, without its key.
      const worker = loadedConfig(sharded, 'tg-toolgate-worker-sandbox');
      expect(worker.clients.map((c) => [c.id, c.shard, c.keySha256])).toEqual([
        ['ops', undefined, '0'.repeat(64)],
        ['assistant', 's1', '0'.repeat(64)],
      ]);
    });

    it('passes a Sentinel shard, its own prefix and tls through to the config', () => {
      const r = render(
        ...SHARDS,
        ...KEYS,
        ...shardList({
          id: 's2',
          sentinel: { name: 'm2', nodes: ['sentinel-s2:26379'] },
          prefix: 'tg2',
          tls: { servername: 'redis-s2.example' },
        }),
      );
      const map = new ShardMap(loadedConfig(r, 'tg-toolgate-worker-fast'));
      expect(map.byId('s2')!.redis).toMatchObject({
        sentinel: { name: 'm2', nodes: ['sentinel-s2:26379'] },
        prefix: 'tg2',
        tls: { servername: 'redis-s2.example' },
      });
      expect(map.byId('s2')!.redis.url).toBeUndefined();
    });

    it('scales each worker pool on the sum of its queue over the shards (one Prometheus trigger, not one per shard)', () => {
      for (const [queue, perReplica] of [
        ['fast', '32'],
        ['sandbox', '4'],
      ] as const) {
        const so = sharded.get<{ triggers: { type: string; metadata: Record<string, string> }[] }>(
          'ScaledObject',
          `tg-toolgate-worker-${queue}`,
        );
        // KEDA scales on the highest of several triggers: one per shard would follow the
        // busiest shard, while every worker serves all of them. And KEDA's redis,
        // redis-sentinel and redis-cluster triggers count a list (LLEN), not BullMQ's
        // prioritized set (the last test of this file).
        expect(so.spec.triggers.map((t) => t.type)).toEqual(['prometheus']);
        expect(so.spec.triggers[0]!.metadata.threshold).toBe(perReplica);
        // Every gateway reports every shard's counts: max across gateways per shard, then sum.
        expect(so.spec.triggers[0]!.metadata.query).toBe(
          `sum(max by (shard, state) (toolgate_queue_jobs{namespace="tools",job="tg-toolgate-gateway",queue="${queue}",state=~"waiting|active"}))`,
        );
      }
    });

    it('refuses a bad shard list at render time, naming the field', () => {
      const fails = (...set: string[]) =>
        renderFails(...SHARDS, ...KEYS, ...set.flatMap((s) => ['--set', s]));
      expect(fails('redis.url=redis://redis:6379')).toContain(
        'set either redis.shards or redis.url, not both',
      );
      expect(fails('redis.cluster.nodes={c-0:6379}')).toContain(
        'set either redis.shards or redis.cluster, not both',
      );
      expect(fails('redis.tls.servername=x')).toContain(
        'set either redis.shards or redis.tls, not both',
      );
      const failsWith = (...list: Record<string, unknown>[]) =>
        renderFails(...SHARDS, ...KEYS, ...shardList(list[0]!, ...list.slice(1)));
      expect(failsWith({ id: 's2', prefix: 'tg2' })).toContain(
        'redis.shards[2] (s2) needs exactly one of url, sentinel, cluster (got none)',
      );
      expect(
        failsWith({ id: 's2', url: 'redis://redis-s2:6379', cluster: { nodes: ['c-0:6379'] } }),
      ).toContain(
        'redis.shards[2] (s2) needs exactly one of url, sentinel, cluster (got url and cluster)',
      );
      expect(failsWith({ id: 's2', sentinel: { name: 'm2' } })).toContain(
        'redis.shards[2] (s2): sentinel needs name',
      );
      expect(failsWith({ id: 's2', cluster: { password: 'p' } })).toContain(
        'redis.shards[2] (s2): cluster needs nodes',
      );
      expect(failsWith({ id: 's1', url: 'redis://redis-s2:6379' })).toContain(
        'redis.shards[2] (s1): duplicate shard id "s1"',
      );
      expect(failsWith({ id: 's2', url: 'redis://redis-s2:6379', home: true })).toContain(
        'only one of redis.shards is home (got s0 and s2)',
      );
      const clients = (shard: string) => [
        '--set-json',
        `clients=${JSON.stringify([
          { id: 'ops', key: '${TOOLGATE_ADMIN_KEY}', admin: true },
          { id: 'assistant', key: '${TOOLGATE_ASSISTANT_KEY}', shard },
        ])}`,
      ];
      expect(renderFails(...SHARDS, ...KEYS, ...clients('s9'))).toContain(
        'client "assistant" names shard "s9", which redis.shards does not have (s0, s1, s2)',
      );
      // The values schema: a shard's fields are closed, its id is what the config takes.
      expect(failsWith({ id: 's2', uri: 'redis://redis-s2:6379' })).toMatch(/uri/);
      expect(failsWith({ id: 'S2', url: 'redis://redis-s2:6379' })).toMatch(/shards\/2\/id/);
      // Without shards, a pinned client names a shard that does not exist.
      expect(renderFails(...KEYS, ...clients('s1'))).toContain(
        'client "assistant" names shard "s1", but redis.shards is not set',
      );
      // `home`, the one shard a deployment without redis.shards has, is a shard it names.
      const home = render(...KEYS, ...clients('home'));
      expect(new ShardMap(loadedConfig(home, 'tg-toolgate-gateway')).of('assistant').id).toBe(
        'home',
      );
    });
  });
});

describe('the ScaledObject query against a real gateway', () => {
  let stack: Stack;
  let worker: ToolWorker;
  let redis: Redis;

  beforeAll(async () => {
    // A worker for the fast queue only (what `--queues fast` gives): sandbox calls stay
    // queued, as they do while the sandbox pool scales up from zero.
    stack = await startStack({ worker: false });
    worker = createWorker({
      config: stack.config,
      registry: createToolRegistry(),
      logger: createLogger('test', { level: 'silent' }),
      // As a fast-queue worker has them (main.ts); no sandbox: it never takes a sandbox call.
      services: { http: createHttpServices(stack.config.policy.http) } as ToolServices,
      queues: ['fast'],
    });
    await worker.start();
    redis = new Redis(inject('redisUrl'));
  });
  afterAll(async () => {
    await worker.close();
    await stack.close();
    redis.disconnect();
  });

  it('counts queued calls that a Redis list scaler (LLEN) could not', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await stack.call('/tools/run_python/execute?wait=false', {
        json: { code: `print(${i})` },
      });
      expect(res.status).toBe(202);
    }
    // Where BullMQ keeps them: its prioritized set (by fair priority), not the wait list.
    const queue = `${Keys.for(stack.config.redis).queuePrefix}:sandbox:prioritized`;
    expect(await redis.type(queue)).toBe('zset');
    expect(await redis.zcard(queue)).toBe(5);

    // The series the rendered query selects, as this gateway exports them.
    const so = render(...KEYS).get<{ triggers: { metadata: Record<string, string> }[] }>(
      'ScaledObject',
      'tg-toolgate-worker-sandbox',
    );
    const { query, threshold } = so.spec.triggers[0]!.metadata;
    const states = /state=~"([^"]+)"/.exec(query!)![1]!.split('|');
    expect(query).toContain('toolgate_queue_jobs{');
    expect(query).toContain('queue="sandbox"');
    const metrics = await (await fetch(stack.metricsUrl)).text();
    const sample = (state: string) => {
      const wanted = { queue: 'sandbox', state };
      const line = metrics.split('\n').find((l) => {
        const m = /^toolgate_queue_jobs\{([^}]*)\} /.exec(l);
        if (!m) return false;
        const labels = Object.fromEntries(
          m[1]!.split(',').map((kv) => [kv.split('=')[0], JSON.parse(kv.split('=')[1]!)]),
        );
        return Object.entries(wanted).every(([k, v]) => labels[k] === v);
      });
      expect(line, `toolgate_queue_jobs{queue="sandbox",state="${state}"}`).toBeDefined();
      return Number(line!.split(' ').at(-1));
    };
    const depth = states.reduce((sum, state) => sum + sample(state), 0);
    expect(depth).toBe(5);
    // KEDA's desired replicas for that depth: ceil(5 / 4 calls per pod).
    expect(Math.ceil(depth / Number(threshold))).toBe(2);
  });
});

/**
 * Renders deploy/helm/toolgate with the helm binary of helm-binary.ts (no cluster, no network)
 * and reads the objects back, for the chart tests.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { helmBinary } from './helm-binary.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CHART = `${ROOT}deploy/helm/toolgate`;
export const KEYS = [
  '--set-string',
  'secret.values.admin-key=admin-key-0123456789abcdef',
  '--set-string',
  'secret.values.assistant-key=assistant-key-0123456789abcdef',
];

// Minimal shapes of what the assertions read; the schemas check the rest.
export interface Meta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
}
export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string } };
}
export interface Probe {
  httpGet?: { path: string; port: string | number };
}
export interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: { name: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  securityContext?: Record<string, unknown>;
  volumeMounts?: { name: string; mountPath: string }[];
}
export interface PodSpec {
  hostUsers?: boolean;
  securityContext?: Record<string, unknown>;
  containers: Container[];
  volumes?: { name: string; hostPath?: { path: string }; emptyDir?: object }[];
}
export interface NetworkPolicyRule {
  to?: unknown[];
  from?: unknown[];
  ports?: { protocol?: string; port: number }[];
}
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: Meta;
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
}

export interface Rendered {
  objects: K8sObject[];
  get<T = Record<string, unknown>>(kind: string, name: string): K8sObject & { spec: T };
}

export function helm(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const out = spawnSync(helmBinary(), args, {
    encoding: 'utf8',
    // No cluster, no repositories, no network: helm reads only the chart directory.
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/tmp',
      HELM_CACHE_HOME: `${ROOT}test/node_modules/.cache/toolgate-helm/home`,
      HELM_CONFIG_HOME: `${ROOT}test/node_modules/.cache/toolgate-helm/home`,
      HELM_DATA_HOME: `${ROOT}test/node_modules/.cache/toolgate-helm/home`,
    },
    timeout: 60_000,
  });
  return { status: out.status, stdout: out.stdout, stderr: out.stderr };
}

export function render(...args: string[]): Rendered {
  const { status, stdout, stderr } = helm([
    'template',
    'tg',
    CHART,
    '--namespace',
    'tools',
    ...args,
  ]);
  if (status !== 0) throw new Error(`helm template failed (${status}): ${stderr}`);
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(stdout)) {
    // Duplicate keys or bad YAML would be an error here: the API server would refuse them too.
    if (doc.errors.length > 0) throw new Error(`bad YAML from helm: ${doc.errors[0]!.message}`);
    const value = doc.toJS() as K8sObject | null;
    if (value) objects.push(value);
  }
  return {
    objects,
    get<T>(kind: string, name: string) {
      const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
      if (!found) throw new Error(`no ${kind} ${name} in the render`);
      return found as K8sObject & { spec: T };
    },
  };
}

export function renderFails(...args: string[]): string {
  const { status, stderr } = helm(['template', 'tg', CHART, ...args]);
  expect(status).not.toBe(0);
  return stderr;
}

export function podSpec(r: Rendered, name: string): PodSpec {
  return r.get<{ template: { spec: PodSpec } }>('Deployment', name).spec.template.spec;
}

/** The env a container sees: plain values and the Secret's keys, as the kubelet would set. */
export function containerEnv(r: Rendered, c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const v of c.env ?? []) {
    const ref = v.valueFrom?.secretKeyRef;
    if (ref) {
      const secret = r.get('Secret', ref.name);
      const value = secret.stringData?.[ref.key];
      if (value === undefined) throw new Error(`Secret ${ref.name} has no key ${ref.key}`);
      env[v.name] = value;
    } else if (v.value !== undefined) env[v.name] = v.value;
  }
  return env;
}

/**
 * The `sandbox:` section of the toolgate config (docs/spec.md §2, §5). Self-contained so the config
 * package can embed it; every field has a default.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

export const SandboxLimitsSchema = Type.Object(
  {
    memoryMb: Type.Integer({
      minimum: 16,
      default: 512,
      description: 'Memory (RAM, no swap) per call, MiB',
    }),
    cpus: Type.Number({
      exclusiveMinimum: 0,
      maximum: 64,
      default: 1,
      description: 'CPU share per call, in cores',
    }),
    pids: Type.Integer({ minimum: 8, default: 128, description: 'Processes and threads per call' }),
    fileSizeMb: Type.Integer({
      minimum: 1,
      default: 64,
      description: 'Largest file a call may write, MiB (RLIMIT_FSIZE)',
    }),
    tmpfsMb: Type.Integer({
      minimum: 1,
      default: 64,
      description: 'Size of the writable /tmp, MiB',
    }),
    outputBytes: Type.Integer({
      minimum: 1024,
      default: 262_144,
      description:
        'stdout and stderr are each cut at this many bytes; a call writing far past it is killed',
    }),
    workspaceMb: Type.Integer({
      minimum: 8,
      default: 1024,
      description:
        "Size of each client's workspace, MiB (a filesystem image of its own; see docs/workspaces.md). Grows online when raised; a smaller value applies only to workspaces created afterwards",
    }),
    workspaceInodes: Type.Integer({
      minimum: 64,
      default: 65_536,
      description: 'Files and directories a workspace may hold (inodes of its filesystem)',
    }),
    timeoutMs: Type.Integer({
      minimum: 100,
      default: 30_000,
      description: 'Default wall-clock timeout of a call',
    }),
    maxTimeoutMs: Type.Integer({
      minimum: 100,
      default: 300_000,
      description: 'Largest timeout a call may ask for',
    }),
  },
  { default: {} },
);

export const SandboxImageSchema = Type.Object({
  docker: Type.String({
    minLength: 1,
    description: 'Docker image tag (built by scripts/sandbox/build-images.sh)',
  }),
  rootfs: Type.String({
    minLength: 1,
    description:
      'Root filesystem directory for bwrap; relative paths are resolved from the working directory',
  }),
});

export const SandboxConfigSchema = Type.Object(
  {
    driver: Type.Union([Type.Literal('auto'), Type.Literal('docker'), Type.Literal('bwrap')], {
      default: 'auto',
      description: 'auto = docker when its socket answers, else bwrap',
    }),
    images: Type.Record(Type.String({ pattern: '^[a-z0-9][a-z0-9_-]*$' }), SandboxImageSchema, {
      default: {
        python: {
          docker: 'toolgate/sandbox-python:local',
          rootfs: 'deploy/sandbox/.build/rootfs/python',
        },
        shell: {
          docker: 'toolgate/sandbox-shell:local',
          rootfs: 'deploy/sandbox/.build/rootfs/shell',
        },
        // Node.js and the pinned MCP stdio servers: long-lived upstream sandboxes (open()).
        node: {
          docker: 'toolgate/sandbox-node:local',
          rootfs: 'deploy/sandbox/.build/rootfs/node',
        },
      },
    }),
    workspacesRoot: Type.String({
      minLength: 1,
      default: '/var/lib/toolgate/workspaces',
      description: 'Host directory holding one workspace per client, mounted at /workspace',
    }),
    stateDir: Type.String({
      minLength: 1,
      default: '/var/lib/toolgate/sandbox',
      description:
        'Host directory for the driver: workspace mount slots of the warm pool, heartbeats',
    }),
    limits: SandboxLimitsSchema,
    workspaceQuota: Type.Union(
      [Type.Literal('auto'), Type.Literal('required'), Type.Literal('off')],
      {
        default: 'auto',
        description:
          'How workspace quotas are enforced: each workspace is a loop-mounted ext4 image. auto = fall back to a plain directory (warning logged once) where this host cannot loop-mount; required = refuse workspace calls there; off = plain directories, no quota',
      },
    ),
    workspaceTtlDays: Type.Number({
      minimum: 0,
      default: 30,
      description: 'A workspace no call used for this many days is deleted; 0 = never',
    }),
    pool: Type.Object(
      {
        size: Type.Integer({
          minimum: 0,
          default: 2,
          description: 'Warm containers kept per image (docker); 0 disables the pool',
        }),
        sizes: Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
          // The node image runs long-lived sandboxes only, which never take a warm container.
          default: { node: 0 },
          description: 'Per-image override of size',
        }),
        maxIdleMs: Type.Integer({
          minimum: 1000,
          default: 600_000,
          description: 'A warm container older than this is replaced',
        }),
      },
      { default: {} },
    ),
    reaper: Type.Object(
      {
        intervalMs: Type.Integer({ minimum: 1000, default: 30_000 }),
        maxAgeMs: Type.Integer({
          minimum: 10_000,
          default: 1_800_000,
          description: 'Any sandbox container older than this is removed, whoever owns it',
        }),
      },
      { default: {} },
    ),
    docker: Type.Object(
      {
        socketPath: Type.String({ default: '/var/run/docker.sock' }),
        runtime: Type.Optional(Type.String({ description: 'OCI runtime, e.g. runsc for gVisor' })),
      },
      { default: {} },
    ),
    bwrap: Type.Object(
      {
        seccomp: Type.Boolean({
          default: true,
          description:
            'Load the seccomp filter into bwrap sandboxes (docs/sandbox-hardening.md). false runs them without one: user namespaces stay disabled, but keyctl, bpf, perf_event_open, ptrace and the rest of the kernel surface Docker closes are open',
        }),
        seccompFilter: Type.String({
          minLength: 1,
          default: 'deploy/sandbox/.build/seccomp/sandbox.bpf',
          description:
            'The compiled filter (built by scripts/sandbox/build-images.sh); relative paths are resolved from the working directory',
        }),
      },
      { default: {} },
    ),
    allowNetwork: Type.Boolean({
      default: false,
      description: 'Whether a call may ask for network access at all (tools never do by default)',
    }),
    egress: Type.Object(
      {
        maxConnections: Type.Integer({
          minimum: 1,
          default: 256,
          description:
            'Tunnels and requests open at once through the egress filter of one worker, all clients together',
        }),
        maxConnectionsPerClient: Type.Integer({
          minimum: 1,
          default: 64,
          description:
            "One client's share of maxConnections (at most maxConnections): the client at its share is refused while the others get theirs",
        }),
      },
      { default: {} },
    ),
  },
  { default: {} },
);

export type SandboxLimits = Static<typeof SandboxLimitsSchema>;
export type SandboxImage = Static<typeof SandboxImageSchema>;
export type SandboxConfig = Static<typeof SandboxConfigSchema>;
/** What callers may pass: any subset, defaults fill the rest. */
export type SandboxConfigInput = DeepPartial<SandboxConfig>;

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

/**
 * Fills defaults and validates. The config package validates the whole file with ajv; this is
 * for callers that build a sandbox config by hand (tests, bench).
 */
export function parseSandboxConfig(input: SandboxConfigInput = {}): SandboxConfig {
  const value = Value.Default(SandboxConfigSchema, structuredClone(input));
  const errors = [...Value.Errors(SandboxConfigSchema, value)];
  const first = errors[0] ?? sandboxConfigProblems(value as SandboxConfig)[0];
  if (first) throw new Error(`invalid sandbox config at ${first.path || '/'}: ${first.message}`);
  return value as SandboxConfig;
}

/**
 * What the schema cannot say: checks across fields of a schema-valid section, with paths
 * inside the section (the config package prefixes `/sandbox`).
 */
export function sandboxConfigProblems(config: SandboxConfig): { path: string; message: string }[] {
  const { maxConnections, maxConnectionsPerClient } = config.egress;
  if (maxConnectionsPerClient <= maxConnections) return [];
  return [
    {
      path: '/egress/maxConnectionsPerClient',
      message: `must be at most egress.maxConnections (${maxConnections}), got ${maxConnectionsPerClient}`,
    },
  ];
}

/**
 * `toolgate gateway` and `toolgate worker`: one service in this process, under runService
 * (config once, signals, drain) — what main.ts runs and what the images start. Tracing is
 * registered by the bin before anything loads (bin/toolgate.mjs).
 */
import path from 'node:path';
import { UsageError, type CliIo, type Command, type Parsed } from '../command.js';

const CONFIG_HELP = `  --config <file>  the config file (default: $TOOLGATE_CONFIG; none = defaults + env)`;

function serviceOptions(parsed: Parsed, io: CliIo) {
  const file = parsed.values.config;
  return {
    env: { ...io.env },
    ...(typeof file === 'string' ? { file: path.resolve(io.cwd, file) } : {}),
  };
}

export const gatewayCommand: Command = {
  name: 'gateway',
  summary: 'run the gateway (HTTP API, MCP) with the current config',
  help: `usage: toolgate gateway [--config <file>]

  Starts the gateway in this process: loads the config (a bad one exits 2 naming the field),
  loads plugins, listens on server.host:server.port (PORT, HOST override) and serves /metrics
  on server.metricsPort (GATEWAY_METRICS_PORT; 0 = off), never on the API port. SIGTERM or
  Ctrl-C finishes in-flight requests and exits 0. Logs are JSON lines on stdout (pino).

${CONFIG_HELP}

Exit codes: 0 after a clean shutdown, 1 failed to start, 2 invalid config.
`,
  options: { config: { type: 'string', short: 'c' } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const { runService } = await import('@toolgate/lifecycle');
    const { startGateway } = await import('@toolgate/gateway');
    runService('toolgate-gateway', startGateway, serviceOptions(parsed, io));
    return undefined;
  },
};

export const workerCommand: Command = {
  name: 'worker',
  summary: 'run a worker (tool calls from the queues) with the current config',
  help: `usage: toolgate worker [--config <file>] [--queues fast,sandbox]

  Starts a worker in this process: consumes the queues, runs in-process tools and sandboxed
  ones (a worker without the sandbox queue never starts a sandbox driver), serves /metrics and
  /healthz on worker.metricsPort. SIGTERM or Ctrl-C drains in-flight calls (45 s), then exits.

${CONFIG_HELP}
  --queues <list>  the queues to consume, overriding worker.queues: fast, sandbox or both

Exit codes: 0 after a clean shutdown, 1 failed to start, 2 invalid config.
`,
  options: { config: { type: 'string', short: 'c' }, queues: { type: 'string', short: 'q' } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const options = serviceOptions(parsed, io);
    const queues = parsed.values.queues;
    if (typeof queues === 'string') {
      const list = queues.split(',').map((q) => q.trim());
      const bad = list.find((q) => q !== 'fast' && q !== 'sandbox');
      if (bad !== undefined || list.length === 0)
        throw new UsageError(`toolgate worker: --queues takes fast, sandbox or fast,sandbox`);
      // The same override the config loader already knows (TOOLGATE_WORKER_QUEUES).
      options.env.TOOLGATE_WORKER_QUEUES = list.join(',');
    }
    const { runService } = await import('@toolgate/lifecycle');
    const { startWorker } = await import('@toolgate/worker');
    runService('toolgate-worker', startWorker, options);
    return undefined;
  },
};

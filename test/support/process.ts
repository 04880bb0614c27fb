import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Service {
  child: ChildProcess;
  output(): string;
  /** Resolves with the first match of `re` in stdout+stderr. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exited: Promise<number | null>;
}

/** Starts a service's main.ts the way scripts/up.sh does (TypeScript sources through tsx). */
export function startService(name: 'gateway' | 'worker', env: Record<string, string>): Service {
  return start(
    name,
    [
      '--conditions=@toolgate/source',
      '--import',
      'tsx',
      '--import',
      './packages/telemetry/src/register.ts',
      `services/${name}/src/main.ts`,
    ],
    env,
  );
}

/** The `toolgate` bin as a user runs it from a checkout: `toolgate <args…>`. */
export const TOOLGATE_BIN = `${ROOT}packages/cli/bin/toolgate.mjs`;

/** Starts `toolgate <args…>` (a long-running command: gateway, worker, up). */
export function startToolgate(args: string[], env: Record<string, string>): Service {
  return start(`toolgate ${args[0] ?? ''}`, [TOOLGATE_BIN, ...args], env);
}

/** `toolgate <args…>` of another checkout (`root`, ending in /), run from there. */
export function startToolgateIn(
  root: string,
  args: string[],
  env: Record<string, string>,
): Service {
  const bin = `${root}packages/cli/bin/toolgate.mjs`;
  return start(`toolgate ${args[0] ?? ''}`, [bin, ...args], env, root);
}

function start(name: string, args: string[], env: Record<string, string>, cwd = ROOT): Service {
  const child = spawn(process.execPath, args, {
    cwd,
    // No gateway metrics listener unless a test asks for one: parallel gateways would all
    // take the default port.
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/tmp',
      GATEWAY_METRICS_PORT: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    text += chunk.toString();
    for (const l of listeners) l();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  );
  return {
    child,
    output: () => text,
    exited,
    waitFor(re, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = re.exec(text);
          if (m) {
            listeners.delete(check);
            clearTimeout(timer);
            resolve(m);
          }
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`timed out waiting for ${re} in:\n${text}`));
        }, timeoutMs);
        listeners.add(check);
        void exited.then(() =>
          setTimeout(() => {
            if (listeners.has(check)) {
              listeners.delete(check);
              clearTimeout(timer);
              reject(new Error(`${name} exited before printing ${re}:\n${text}`));
            }
          }, 50),
        );
        check();
      });
    },
  };
}

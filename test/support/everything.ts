/**
 * The real `@modelcontextprotocol/server-everything` (a pinned devDependency) in its Streamable
 * HTTP mode, bound to 127.0.0.1: the upstream MCP server the upstream, conformance and
 * Inspector tests put behind toolgate.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from './redis-server.js';

const EVERYTHING = fileURLToPath(
  new URL('../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
);
const LOOPBACK = fileURLToPath(new URL('../fixtures/upstreams/loopback.mjs', import.meta.url));

export interface Everything {
  /** Its Streamable HTTP endpoint, `http://127.0.0.1:<port>/mcp`. */
  url: string;
  child: ChildProcess;
}

/** Starts it on a free port and resolves once it says it listens (at most 20 s). */
export async function startEverything(): Promise<Everything> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', LOOPBACK, EVERYTHING, 'streamableHttp'], {
    env: { PATH: process.env.PATH ?? '', PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`server-everything did not start: ${output}`)),
      20_000,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (/listening on port/i.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`server-everything exited ${code}: ${output}`)));
  });
  return { url: `http://127.0.0.1:${port}/mcp`, child };
}

#!/usr/bin/env node
// The `toolgate` command. In a checkout it runs the TypeScript sources (never a stale build):
// it replaces itself with `node --conditions=@toolgate/source --import tsx` on the same
// arguments, so every workspace package resolves to its src/ the way scripts/up.sh runs them.
// Where only the build ships (the images: no src/ or no tsx), it runs dist/.
/* global process, URL -- Node's globals (the lint config declares none for JS) */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const SOURCE = '--conditions=@toolgate/source';
const sources = existsSync(new URL('../src/cli.ts', import.meta.url));

function tsxUrl() {
  try {
    return import.meta.resolve('tsx');
  } catch {
    return undefined;
  }
}

async function main() {
  if (sources && !process.execArgv.includes(SOURCE)) {
    const tsx = tsxUrl();
    if (tsx) {
      const argv = [process.execPath, SOURCE, '--import', tsx, ...process.execArgv];
      argv.push(fileURLToPath(import.meta.url), ...process.argv.slice(2));
      if (typeof process.execve === 'function') process.execve(process.execPath, argv);
      // Node < 23.11 has no execve: a child with the signals passed on.
      const child = spawn(argv[0], argv.slice(1), { stdio: 'inherit' });
      for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
        process.on(signal, () => child.kill(signal));
      child.on('exit', (code, signal) => {
        process.exitCode = code ?? (signal === 'SIGINT' ? 130 : 1);
      });
      return;
    }
  }
  const { runCli } =
    sources && process.execArgv.includes(SOURCE)
      ? await import('../src/cli.ts')
      : await import('../dist/cli.js');
  // Under pnpm the process runs in the workspace root; INIT_CWD is where the command was typed,
  // which is where relative paths (a config file, --dir) point.
  const code = await runCli(process.argv.slice(2), {
    cwd: process.env.INIT_CWD || process.cwd(),
    env: process.env,
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
    isTTY: process.stdout.isTTY === true,
    stderrIsTTY: process.stderr.isTTY === true,
  });
  // undefined: a service (gateway, worker, up) now owns the process and exits it itself.
  if (code !== undefined) process.exitCode = code;
}

await main();

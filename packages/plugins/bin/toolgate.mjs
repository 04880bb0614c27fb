#!/usr/bin/env node
// The `toolgate` command. In a checkout it runs the TypeScript sources through tsx (never a
// stale build); where only the build ships (no src/ or no tsx), it runs dist/.
/* global process, URL -- Node's globals (the lint config declares none for JS) */
import { existsSync } from 'node:fs';

async function load() {
  if (existsSync(new URL('../src/cli.ts', import.meta.url))) {
    const tsx = await import('tsx/esm/api').catch(() => undefined);
    if (tsx) return tsx.tsImport('../src/cli.ts', import.meta.url);
  }
  return import(new URL('../dist/cli.js', import.meta.url).href);
}

const { runCli } = await load();
// Under `pnpm --filter @toolgate/plugins …` the process runs in the package folder; INIT_CWD is
// where the command was typed, which is where a relative --dir should point.
const cwd = process.env.INIT_CWD || process.cwd();
process.exitCode = await runCli(process.argv.slice(2), {
  cwd,
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
});

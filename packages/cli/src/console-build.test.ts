import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { consoleBuildState, stampConsoleBuild } from './console-build.js';

describe('the console build stamp (`toolgate up` rebuilds what changed)', () => {
  let root: string;
  let consoleDir: string;
  const put = async (rel: string, text: string) => {
    await mkdir(path.dirname(path.join(root, rel)), { recursive: true });
    await writeFile(path.join(root, rel), text);
  };

  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'tg-console-build-'));
    consoleDir = path.join(root, 'console');
    await put('console/package.json', '{"name":"@toolgate/console"}');
    await put('console/src/app.tsx', 'export const App = () => null;');
    await put('pnpm-lock.yaml', 'lockfileVersion: 9.0\n');
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('missing without a built index.html, stale without a stamp, current once stamped', async () => {
    expect((await consoleBuildState(consoleDir)).state).toBe('missing');
    await put('console/dist/index.html', '<!doctype html>');
    const { state, hash } = await consoleBuildState(consoleDir);
    expect(state).toBe('stale');
    await stampConsoleBuild(consoleDir, hash);
    expect(await consoleBuildState(consoleDir)).toEqual({ state: 'current', hash });
  });

  it('stale after a change to a source file, a new file or the lockfile; not after dist/ or node_modules/', async () => {
    await put('console/dist/index.html', '<!doctype html>');
    const stamp = async () =>
      stampConsoleBuild(consoleDir, (await consoleBuildState(consoleDir)).hash);
    await stamp();
    // The build's own output and the installed packages are not sources.
    await put('console/dist/assets/index-abc.js', 'x');
    await put('console/node_modules/vite/index.js', 'y');
    expect((await consoleBuildState(consoleDir)).state).toBe('current');

    for (const [rel, text] of [
      ['console/src/app.tsx', 'export const App = () => "changed";'],
      ['console/src/pages/new.tsx', 'export {};'],
      ['pnpm-lock.yaml', 'lockfileVersion: 9.0\n# vite bumped\n'],
    ] as const) {
      await put(rel, text);
      expect((await consoleBuildState(consoleDir)).state, rel).toBe('stale');
      await stamp();
      expect((await consoleBuildState(consoleDir)).state, rel).toBe('current');
    }
    // A build removed (dist/ deleted): missing again, whatever the stamp said.
    await rm(path.join(consoleDir, 'dist'), { recursive: true });
    expect((await consoleBuildState(consoleDir)).state).toBe('missing');
  });
});

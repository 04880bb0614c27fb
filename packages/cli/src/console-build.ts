/**
 * Whether the checkout's operator console (console/dist, what the gateway serves at /console/)
 * was built from the sources there now. `toolgate up` rebuilds it when not, as the images do
 * (their build step reruns whenever console/ changes): a hash of the sources, stamped into
 * dist/ after each build.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Written into dist/ after a build: the source hash it was built from. */
export const CONSOLE_STAMP = '.source-hash';

/** Not sources: the build's output and the installed packages. */
const SKIP = new Set(['node_modules', 'dist']);

async function sourceFiles(dir: string, rel = ''): Promise<string[]> {
  const out: string[] = [];
  const entries = await readdir(path.join(dir, rel), { withFileTypes: true });
  for (const entry of entries) {
    const child = rel ? `${rel}/${entry.name}` : entry.name;
    if (entry.isDirectory()) {
      if (!SKIP.has(entry.name)) out.push(...(await sourceFiles(dir, child)));
    } else if (entry.isFile()) out.push(child);
  }
  return out;
}

/**
 * sha256 over every file of `consoleDir` but node_modules/ and dist/ (path and content, in
 * path order), and the lockfile beside it, which pins the bundler and libraries.
 */
export async function consoleSourceHash(consoleDir: string): Promise<string> {
  const hash = createHash('sha256');
  const files = (await sourceFiles(consoleDir)).sort();
  for (const file of files) {
    hash.update(`${file}\0`);
    hash.update(await readFile(path.join(consoleDir, file)));
    hash.update('\0');
  }
  const lockfile = path.join(consoleDir, '..', 'pnpm-lock.yaml');
  if (existsSync(lockfile)) hash.update(await readFile(lockfile));
  return hash.digest('hex');
}

/** `current`: dist/ holds a build of exactly these sources; else why it needs one. */
export async function consoleBuildState(
  consoleDir: string,
): Promise<{ state: 'current' | 'missing' | 'stale'; hash: string }> {
  const hash = await consoleSourceHash(consoleDir);
  const dist = path.join(consoleDir, 'dist');
  if (!existsSync(path.join(dist, 'index.html'))) return { state: 'missing', hash };
  const stamp = await readFile(path.join(dist, CONSOLE_STAMP), 'utf8').catch(() => '');
  return { state: stamp.trim() === hash ? 'current' : 'stale', hash };
}

/** Records that dist/ was just built from sources with this hash. */
export async function stampConsoleBuild(consoleDir: string, hash: string): Promise<void> {
  await writeFile(path.join(consoleDir, 'dist', CONSOLE_STAMP), `${hash}\n`);
}

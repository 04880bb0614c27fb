/**
 * The build-input hashes scripts/sandbox/build-images.sh labels its images with
 * (`toolgate.hash`) and stamps rootfs exports with: recomputed here so `toolgate doctor` can
 * tell an image built from older files. Must stay in step with `context_hash` in that script:
 * sha256sum lines of every file of the build context (sorted by path, as `sort -z` in the C
 * locale), then `parent=<parent hash>`, hashed again and cut to 16 hex digits.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';

const hex16 = (text: string | Buffer) =>
  createHash('sha256').update(text).digest('hex').slice(0, 16);

async function files(dir: string, rel = '.'): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(path.join(dir, rel), { withFileTypes: true })) {
    const child = `${rel}/${entry.name}`;
    if (entry.isDirectory()) out.push(...(await files(dir, child)));
    else if (entry.isFile()) out.push(child);
  }
  return out;
}

async function contextHash(dir: string, parent: string): Promise<string> {
  const names = (await files(dir)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  let text = '';
  for (const name of names) {
    const sum = createHash('sha256')
      .update(await readFile(path.join(dir, name)))
      .digest('hex');
    text += `${sum}  ${name}\n`;
  }
  return hex16(`${text}parent=${parent}\n`);
}

/**
 * The hash build-images.sh would label `toolgate/sandbox-<name>:local` with, from the sources in
 * `sandboxDir` (deploy/sandbox); undefined when they are not here (an installed image).
 */
export async function expectedImageHash(
  sandboxDir: string,
  name: string,
  suite = 'bookworm',
  env: Record<string, string | undefined> = {},
): Promise<string | undefined> {
  const context = path.join(sandboxDir, name);
  if (!existsSync(context) || !existsSync(path.join(sandboxDir, 'common'))) return undefined;
  const base = hex16(`suite=${suite} variant=minbase v1`);
  const common = await contextHash(path.join(sandboxDir, 'common'), base);
  const hash = await contextHash(context, common);
  if (name !== 'node') return hash;
  // The node image is hashed with the Node.js version and the extra npm servers it is built with.
  const node = env.SANDBOX_NODE_VERSION || '24.21.0';
  return hex16(`${hash}\nnode=${node} servers=${env.SANDBOX_NPM_SERVERS ?? ''}\n`);
}

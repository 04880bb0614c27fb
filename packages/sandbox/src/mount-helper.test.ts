/** The long-lived mount helper against the host's real mount table (needs root, like the slots). */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MountHelper } from './mount-helper.js';
import { mountTable } from './mounts.js';

const root = process.getuid?.() === 0;
if (!root) console.warn('mount helper tests skipped: mounting needs root');

describe.skipIf(!root)('MountHelper', () => {
  let dir: string;
  const helper = new MountHelper();
  const mounted = async (target: string) => (await mountTable()).some((m) => m.target === target);

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-mount-helper-'));
  });
  afterAll(async () => {
    // Whatever a failed assertion left bound, so the directory can go.
    for (const m of (await mountTable()).filter((m) => m.target.startsWith(dir + '/')))
      await helper.unmount(m.target).catch(() => undefined);
    helper.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('binds and unmounts paths with spaces, quotes and newlines, in order', async () => {
    const source = path.join(dir, "work space 'a'\nb");
    const target = path.join(dir, 'slot $(x) "1"');
    await mkdir(source);
    await mkdir(target);
    await writeFile(path.join(source, 'f.txt'), 'hello');

    await helper.bind(source, target);
    expect(await readFile(path.join(target, 'f.txt'), 'utf8')).toBe('hello');
    expect(await mounted(target)).toBe(true);

    await helper.unmount(target);
    expect(await mounted(target)).toBe(false);
    await expect(readFile(path.join(target, 'f.txt'))).rejects.toThrow();
  });

  it('fails a request with mount’s own message, and serves the next one', async () => {
    const missing = path.join(dir, 'missing');
    const target = path.join(dir, 'target');
    await mkdir(target);
    const results = await Promise.allSettled([
      helper.bind(missing, target),
      helper.bind(dir, target),
      helper.unmount(target),
    ]);
    expect(results[0]).toMatchObject({
      status: 'rejected',
      reason: {
        message: expect.stringMatching(/^mount --bind .*missing.* failed \(status \d+\): \S/),
      },
    });
    expect(results.slice(1).map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(await mounted(target)).toBe(false);
  });

  it('starts again after it was closed', async () => {
    const target = path.join(dir, 'again');
    await mkdir(target);
    helper.close();
    await helper.bind(dir, target);
    expect(await mounted(target)).toBe(true);
    await helper.unmount(target);
  });
});

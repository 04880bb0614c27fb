import { mkdtemp, mkdir, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Workspaces, WorkspacePathError, normalizeRelative } from './workspaces.js';

describe('normalizeRelative', () => {
  it('keeps plain relative paths and normalizes dots', () => {
    expect(normalizeRelative('a/./b/')).toBe('a/b');
    expect(normalizeRelative('')).toBe('');
    expect(normalizeRelative('.')).toBe('');
    expect(normalizeRelative('a/../b')).toBe('b');
  });

  it.each(['/etc/passwd', '/workspace/x', 'C:\\x'])('refuses the absolute path %s', (p) => {
    expect(() => normalizeRelative(p)).toThrow(WorkspacePathError);
  });

  it.each(['..', '../x', 'a/../../x', './../..'])('refuses the escape %s', (p) => {
    expect(() => normalizeRelative(p)).toThrow(/outside the workspace/);
  });
});

describe('Workspaces', () => {
  let root: string;
  let ws: Workspaces;
  beforeAll(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'tg-ws-'));
    ws = new Workspaces(root);
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  it('gives each client its own directory, never shared between distinct ids', () => {
    expect(Workspaces.dirName('assistant-a')).toBe('assistant-a');
    const a = Workspaces.dirName('team/a');
    const b = Workspaces.dirName('team_a');
    expect(a).not.toBe(b);
    expect(a).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(Workspaces.dirName('..')).not.toContain('.');
  });

  it('creates the workspace on first use', async () => {
    const dir = await ws.ensure('alice');
    expect(dir).toBe(path.join(root, 'alice'));
  });

  it('resolves paths inside and refuses symlinks that lead out', async () => {
    const dir = await ws.ensure('bob');
    await mkdir(path.join(dir, 'sub'));
    await writeFile(path.join(dir, 'sub/ok.txt'), 'x');
    await symlink('/etc', path.join(dir, 'etc-link'));
    await symlink('sub/ok.txt', path.join(dir, 'inner-link'));
    await symlink('/nonexistent/target', path.join(dir, 'dangling'));

    await expect(ws.resolve('bob', 'sub/ok.txt')).resolves.toMatchObject({
      relative: 'sub/ok.txt',
      exists: true,
      sandboxPath: '/workspace/sub/ok.txt',
    });
    await expect(ws.resolve('bob', 'sub/new/file.txt')).resolves.toMatchObject({ exists: false });
    await expect(ws.resolve('bob', 'inner-link')).resolves.toMatchObject({
      hostPath: path.join(dir, 'sub/ok.txt'),
    });
    await expect(ws.resolve('bob', 'etc-link/passwd')).rejects.toMatchObject({
      code: 'invalid_path',
      reason: 'symlink_outside',
    });
    await expect(ws.resolve('bob', 'etc-link')).rejects.toMatchObject({
      reason: 'symlink_outside',
    });
    await expect(ws.resolve('bob', 'dangling')).rejects.toMatchObject({
      reason: 'symlink_outside',
    });
    await expect(ws.resolve('bob', '../alice/x')).rejects.toMatchObject({ reason: 'escapes' });
  });
  it('gives a link out one answer, whether or not its target exists, never resolving it', async () => {
    const dir = await ws.ensure('carol');
    const outside = await mkdtemp(path.join(tmpdir(), 'tg-ws-outside-'));
    await writeFile(path.join(outside, 'exists.txt'), 'x');
    // A loop outside: resolving it on the host would fail differently (ELOOP).
    await symlink(path.join(outside, 'loop'), path.join(outside, 'loop'));
    const answers: unknown[] = [];
    for (const target of [
      path.join(outside, 'exists.txt'),
      path.join(outside, 'missing.txt'),
      path.join(outside, 'loop/x'),
      outside,
      '../../../../../../etc/passwd',
    ]) {
      await rm(path.join(dir, 'link'), { force: true });
      await symlink(target, path.join(dir, 'link'));
      for (const requested of ['link', 'link/below'])
        answers.push(
          await ws.resolve('carol', requested).then(
            (ok) => ok,
            (err: WorkspacePathError) => ({
              name: err.name,
              reason: err.reason,
              message: err.message,
            }),
          ),
        );
    }
    const expected = (requested: string) => ({
      name: 'WorkspacePathError',
      reason: 'symlink_outside',
      message: `"${requested}" leads outside the workspace through a symbolic link`,
    });
    expect(answers).toEqual(
      Array.from({ length: 5 }, () => [expected('link'), expected('link/below')]).flat(),
    );
    await rm(outside, { recursive: true, force: true });
  });

  it('reads links the way the sandbox does: /workspace targets inside, loops refused', async () => {
    const dir = await ws.ensure('dave');
    await mkdir(path.join(dir, 'data'));
    await writeFile(path.join(dir, 'data/a.csv'), 'x');
    await symlink('/workspace/data/a.csv', path.join(dir, 'abs-inside'));
    await symlink('data/../data/./a.csv', path.join(dir, 'rel-inside'));
    await symlink('/workspace/../etc/passwd', path.join(dir, 'abs-climb'));
    await symlink('/workspacefoo', path.join(dir, 'abs-prefix'));
    await symlink('loop-b', path.join(dir, 'loop-a'));
    await symlink('loop-a', path.join(dir, 'loop-b'));
    await symlink('data/new-dir', path.join(dir, 'to-missing'));
    const hostPath = path.join(dir, 'data/a.csv');
    await expect(ws.resolve('dave', 'abs-inside')).resolves.toMatchObject({
      hostPath,
      exists: true,
    });
    await expect(ws.resolve('dave', 'rel-inside')).resolves.toMatchObject({
      hostPath,
      exists: true,
    });
    await expect(ws.resolve('dave', 'to-missing/f.txt')).resolves.toMatchObject({
      hostPath: path.join(dir, 'data/new-dir/f.txt'),
      exists: false,
    });
    for (const p of ['abs-climb', 'abs-prefix'])
      await expect(ws.resolve('dave', p)).rejects.toMatchObject({ reason: 'symlink_outside' });
    await expect(ws.resolve('dave', 'loop-a')).rejects.toMatchObject({
      reason: 'invalid',
      message: '"loop-a" has too many symbolic links',
    });
  });
});

describe('Workspaces admin resets (plain directories)', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'tg-ws-reset-'));
  });
  afterAll(() => rm(root, { recursive: true, force: true }));

  it('applies a newer reset generation once, and never wipes what was written while it was unreadable', async () => {
    // The generation source stands in for Redis (WorkspaceResets in @toolgate/calls).
    const gens = new Map<string, number>();
    let down = false;
    const ws = new Workspaces(root, {
      resets: {
        generation: async (c) => {
          if (down) throw new Error('redis down');
          return gens.get(c) ?? 0;
        },
        all: async () => new Map(gens),
      },
    });
    const a = await ws.ensure('alice');
    await writeFile(path.join(a, 'old.txt'), 'x');
    gens.set('alice', 1);
    expect(await readdir(await ws.ensure('alice'))).toEqual([]);
    await writeFile(path.join(a, 'new.txt'), 'y');
    expect(await readdir(await ws.ensure('alice'))).toEqual(['new.txt']);

    down = true;
    const b = await ws.ensure('bob');
    await writeFile(path.join(b, 'during-outage.txt'), 'z');
    down = false;
    gens.set('bob', 4);
    // Made while the generation was unknown: it adopts the current one instead of being wiped.
    expect(await readdir(await ws.ensure('bob'))).toEqual(['during-outage.txt']);
    gens.set('bob', 5);
    expect(await readdir(await ws.ensure('bob'))).toEqual([]);
  });
});

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

  it('applies a new reset once, and never wipes what was written while it was unreadable', async () => {
    // The reset source stands in for Redis (WorkspaceResets in @toolgate/calls).
    const ids = new Map<string, string>();
    let down = false;
    const ws = new Workspaces(root, {
      resets: {
        current: async (c) => {
          if (down) throw new Error('redis down');
          return ids.get(c) ?? null;
        },
        all: async () => new Map(ids),
      },
    });
    const a = await ws.ensure('alice');
    await writeFile(path.join(a, 'old.txt'), 'x');
    ids.set('alice', '1:aa');
    expect(await readdir(await ws.ensure('alice'))).toEqual([]);
    await writeFile(path.join(a, 'new.txt'), 'y');
    expect(await readdir(await ws.ensure('alice'))).toEqual(['new.txt']);

    down = true;
    const b = await ws.ensure('bob');
    await writeFile(path.join(b, 'during-outage.txt'), 'z');
    down = false;
    ids.set('bob', '4:bb');
    // Made while the reset was unknown: it adopts the current one instead of being wiped.
    expect(await readdir(await ws.ensure('bob'))).toEqual(['during-outage.txt']);
    ids.set('bob', '5:cc');
    expect(await readdir(await ws.ensure('bob'))).toEqual([]);
  });

  it('a reset after Redis forgot its ids (its counter starts again) still applies, in a new process too', async () => {
    const ids = new Map<string, string>([['carol', '1:first']]);
    const source = {
      current: async (c: string) => ids.get(c) ?? null,
      all: async () => new Map(ids),
    };
    const first = new Workspaces(root, { resets: source });
    const dir = await first.ensure('carol');
    await writeFile(path.join(dir, 'reset-probe.txt'), 'x');
    // A fresh Redis: nothing known, so nothing to apply …
    ids.clear();
    const second = new Workspaces(root, { resets: source });
    expect(await readdir(await second.ensure('carol'))).toEqual(['reset-probe.txt']);
    // … until its first reset, whose counter is 1 again but whose id is new.
    ids.set('carol', '1:second');
    expect(await readdir(await second.ensure('carol'))).toEqual([]);
    await writeFile(path.join(dir, 'kept.txt'), 'y');
    expect(await readdir(await new Workspaces(root, { resets: source }).ensure('carol'))).toEqual([
      'kept.txt',
    ]);
    // The reaper compares the same way.
    ids.set('carol', '1:third');
    expect(await second.reap()).toMatchObject({ reset: 1 });
  });

  it('a workspace made again after its directory vanished is made under the current reset', async () => {
    const ids = new Map<string, string>([['erin', '1:a']]);
    const ws = () =>
      new Workspaces(root, {
        resets: { current: async (c) => ids.get(c) ?? null, all: async () => new Map(ids) },
      });
    const dir = await ws().ensure('erin');
    await rm(dir, { recursive: true });
    ids.set('erin', '2:b');
    await ws().ensure('erin');
    await writeFile(path.join(dir, 'kept.txt'), 'x');
    expect(await readdir(await ws().ensure('erin'))).toEqual(['kept.txt']);
  });

  it('a marker of the counter version (generation n) equals the id n that version left in Redis', async () => {
    const ids = new Map<string, string>();
    const ws = () =>
      new Workspaces(root, {
        resets: { current: async (c) => ids.get(c) ?? null, all: async () => new Map(ids) },
      });
    const dir = await ws().ensure('dave');
    await writeFile(path.join(dir, 'f.txt'), 'x');
    await writeFile(
      path.join(root, '.markers', 'dave'),
      JSON.stringify({ client: 'dave', created: 1, generation: 3 }),
    );
    ids.set('dave', '3');
    expect(await readdir(await ws().ensure('dave'))).toEqual(['f.txt']);
    ids.set('dave', '1:new');
    expect(await readdir(await ws().ensure('dave'))).toEqual([]);
  });
});

import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LEGACY_CHANNEL_MS, makeChannelDir, reapChannelDirs } from './channel.js';

describe('reapChannelDirs', () => {
  let stateDir: string;
  beforeEach(async () => {
    stateDir = await mkdtemp(path.join(tmpdir(), 'tg-channel-'));
  });
  afterEach(() => rm(stateDir, { recursive: true, force: true }));

  const entries = () => readdir(path.join(stateDir, 'channels')).then((e) => e.sort());

  it('removes the directories of gone workers only, never its own', async () => {
    const gone = new Set(['dead-1-aaaaaa', 'me-2-bbbbbb']);
    await makeChannelDir(stateDir, 'dead-1-aaaaaa');
    await makeChannelDir(stateDir, 'live-3-cccccc');
    // Its own: spared even if a heartbeat check were to call it gone.
    await makeChannelDir(stateDir, 'me-2-bbbbbb');
    // An owner id that is not a plain file name stays one directory.
    await makeChannelDir(stateDir, 'pod/with slash');
    gone.add('pod/with slash');
    expect(await reapChannelDirs(stateDir, 'me-2-bbbbbb', (o) => gone.has(o))).toBe(2);
    expect(await entries()).toEqual(['live-3-cccccc', 'me-2-bbbbbb']);
  });

  it('takes a directory of the layout before owners only once no call could still use it', async () => {
    // channels/<random>/sock: what a worker of an older version killed mid-script left.
    const legacy = path.join(stateDir, 'channels', 'U1UEZvHJ9j1j');
    await mkdir(legacy, { recursive: true });
    await writeFile(path.join(legacy, 'sock'), '');
    expect(await reapChannelDirs(stateDir, 'me', () => true)).toBe(0);
    expect(await entries()).toEqual(['U1UEZvHJ9j1j']);
    const later = Date.now() + LEGACY_CHANNEL_MS + 1000;
    expect(await reapChannelDirs(stateDir, 'me', () => true, later)).toBe(1);
    expect(await entries()).toEqual([]);
  });
});

/**
 * The profile `toolgate login` writes: which gateway, and the key for it. Kept like an ssh key:
 * mode 0600 in a 0700 folder, and not read at all when others could read it.
 */
import { chmodSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import type { CliIo } from '../command.js';

export interface Profile {
  gateway: string;
  key?: string;
}

/** `$XDG_CONFIG_HOME/toolgate/profile.json`, default `~/.config/toolgate/profile.json`. */
export function profilePath(env: CliIo['env']): string {
  const config = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(config, 'toolgate', 'profile.json');
}

/**
 * The profile, or undefined when there is none. A profile that group or others may read is
 * ignored with a warning on stderr (its key may have leaked; ssh refuses such a key the same way).
 */
export function readProfile(io: Pick<CliIo, 'env' | 'err'>): Profile | undefined {
  const path = profilePath(io.env);
  let mode: number;
  try {
    mode = statSync(path).mode;
  } catch {
    return undefined;
  }
  if ((mode & 0o077) !== 0) {
    io.err(
      `toolgate: ${path} is readable by others (mode ${(mode & 0o777).toString(8).padStart(4, '0')}); ignoring it. Run \`chmod 600 ${path}\` or \`toolgate login\` again.\n`,
    );
    return undefined;
  }
  try {
    const profile = JSON.parse(readFileSync(path, 'utf8')) as Partial<Profile>;
    if (typeof profile.gateway !== 'string') return undefined;
    return {
      gateway: profile.gateway,
      ...(typeof profile.key === 'string' ? { key: profile.key } : {}),
    };
  } catch {
    io.err(`toolgate: ${path} is not a toolgate profile (not JSON); ignoring it\n`);
    return undefined;
  }
}

/** Writes the profile with mode 0600 (its folder 0700), replacing any. Returns its path. */
export function writeProfile(env: CliIo['env'], profile: Profile): string {
  const path = profilePath(env);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  // mode on create only: an existing file keeps its mode, hence the chmod before writing the key.
  writeFileSync(path, '', { mode: 0o600 });
  chmodSync(path, 0o600);
  writeFileSync(path, `${JSON.stringify(profile, null, 2)}\n`);
  return path;
}

/** Removes the profile; whether there was one. */
export function removeProfile(env: CliIo['env']): boolean {
  const path = profilePath(env);
  try {
    statSync(path);
  } catch {
    return false;
  }
  rmSync(path, { force: true });
  return true;
}

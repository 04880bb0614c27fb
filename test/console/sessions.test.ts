import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ToolServices } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

// The console's sessions page in a real browser against a real gateway, worker and sandbox:
// a client sees its sessions (age, idle, memory) and stops one; an admin sees every client's.
const CHROMIUM = '/usr/bin/chromium';
const DIST = join(import.meta.dirname, '../../console/dist/index.html');
const noBrowser = existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing`;
const driver = (await whyDriverUnavailable('bwrap')) === undefined ? 'bwrap' : 'docker';
const reason = noBrowser ?? (await whyDriverUnavailable(driver));
if (reason) console.warn(`console sessions: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('console: sessions page (chromium)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let browser: Browser;
  const problems: string[] = [];

  beforeAll(async () => {
    if (!existsSync(DIST))
      throw new Error('console/dist is not built: run `pnpm --filter @toolgate/console build`');
    dir = mkdtempSync(join(tmpdir(), 'toolgate-console-sessions-'));
    chmodSync(dir, 0o711);
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    stack = await startStack({
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) } as ToolServices,
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.close();
    await sandbox?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('lists the client’s sessions with their memory, and Stop ends one', async () => {
    const created = await stack.call('/v1/sessions', { json: { tool: 'run_python' } });
    const { id } = (await created.json()) as { id: string };
    const used = await stack.call('/tools/run_python/execute', {
      json: { code: 'data = bytearray(8 * 1024 * 1024)' },
      headers: { 'x-toolgate-session': id },
    });
    expect(await used.json()).toMatchObject({ status: 'ok' });

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));
    await page.goto(`${stack.url}/console/`);
    await page.getByLabel('API key').fill(KEYS.alice);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Signed in as').waitFor();
    await page.getByRole('link', { name: 'Sessions' }).click();

    const row = page.locator(`tr[data-session-id="${id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toMatch(/run_python.*\d+(\.\d)? MiB/);
    await row.getByRole('button', { name: `Stop session ${id}` }).click();
    await row.waitFor({ state: 'detached' });
    await page.getByText('No sessions.').waitFor();
    const after = await stack.call('/tools/run_python/execute', {
      json: { code: 'print(len(data))' },
      headers: { 'x-toolgate-session': id },
    });
    expect(after.status).toBe(404);
    expect(problems).toEqual([]);
    await context.close();
  }, 60_000);

  it('an admin sees every client’s sessions with their client, and stops another’s', async () => {
    const open = async (key: string) => {
      const res = await stack.call('/v1/sessions', { json: { tool: 'run_python' }, key });
      return ((await res.json()) as { id: string }).id;
    };
    const alices = await open(KEYS.alice);
    const own = await open(KEYS.admin);

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    page.on('pageerror', (e) => problems.push(e.message));
    await page.goto(`${stack.url}/console/`);
    await page.getByLabel('API key').fill(KEYS.admin);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Signed in as').waitFor();
    await page.getByRole('link', { name: 'Sessions' }).click();

    const row = page.locator(`tr[data-session-id="${alices}"]`);
    await row.waitFor();
    expect(await row.locator('td').nth(1).textContent()).toBe('alice');
    expect(await page.locator(`tr[data-session-id="${own}"] td`).nth(1).textContent()).toBe('ops');
    await row.getByRole('button', { name: `Stop session ${alices}` }).click();
    await row.waitFor({ state: 'detached' });
    const after = await stack.call('/tools/run_python/execute', {
      json: { code: '1' },
      headers: { 'x-toolgate-session': alices },
    });
    expect(after.status).toBe(404);
    expect(problems).toEqual([]);
    await context.close();
    await stack.call(`/v1/sessions/${own}`, { method: 'DELETE', key: KEYS.admin });
  }, 60_000);
});

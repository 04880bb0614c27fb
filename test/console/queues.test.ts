import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ToolWorker } from '@toolgate/worker';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withoutSandboxWorker } from '../support/fast-worker.js';
import { KEYS, type Stack } from '../support/stack.js';

// BullMQ's dashboard in a real browser (Debian's chromium driven by playwright-core): an admin
// signed in to the console follows its Queues link and sees the queues and a call waiting in
// `sandbox` (no worker here takes that queue); a client and a stranger are refused.
const CHROMIUM = '/usr/bin/chromium';
const DIST = join(import.meta.dirname, '../../console/dist/index.html');
const reason = existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing`;
if (reason) console.warn(`console queues: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('console: the queue dashboard (chromium)', () => {
  let stack: Stack;
  let worker: ToolWorker;
  let browser: Browser;
  /** Console messages and page errors of the board's pages: CSP violations show up here. */
  const problems: string[] = [];

  beforeAll(async () => {
    if (!existsSync(DIST))
      throw new Error('console/dist is not built: run `pnpm --filter @toolgate/console build`');
    ({ stack, worker } = await withoutSandboxWorker());
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await worker?.close();
    await stack?.close();
  });

  async function open(): Promise<{ context: BrowserContext; page: Page }> {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(15_000);
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    return { context, page };
  }

  async function signIn(page: Page, key: string) {
    await page.goto(`${stack.url}/console/`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Signed in as').waitFor();
  }

  it('an admin follows the console’s Queues link and sees the queues and a waiting call', async () => {
    const accepted = await stack.call('/tools/run_shell/execute?wait=false', {
      json: { command: 'echo waiting for a sandbox' },
    });
    expect(accepted.status).toBe(202);
    const { id } = (await accepted.json()) as { id: string };

    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    await page.getByRole('link', { name: 'Queues' }).click();
    await page.waitForURL(`${stack.url}/admin/queues/`);
    await page.getByRole('link', { name: /^fast/ }).first().waitFor();
    await page
      .getByRole('link', { name: /^sandbox/ })
      .first()
      .click();
    await page.waitForURL(/\/admin\/queues\/queue\/sandbox/);
    // The call, by its id, under its tool's name.
    await page.getByText(id).first().waitFor();
    await page.getByText('run_shell').first().waitFor();
    expect(problems).toEqual([]);

    // Signing out of the console drops the board's cookie too.
    await page.goto(`${stack.url}/console/`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API key').waitFor();
    await expect
      .poll(async () => (await page.request.get(`${stack.url}/admin/queues/api/queues`)).status())
      .toBe(401);
    await context.close();
  }, 120_000);

  it('a client signed in to the console has no Queues link and is refused the board', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.alice);
    await page.getByRole('link', { name: 'Calls' }).waitFor();
    expect(await page.getByRole('link', { name: 'Queues' }).count()).toBe(0);
    const direct = await page.goto(`${stack.url}/admin/queues/`);
    expect(direct?.status()).toBe(401);
    // Nor does a client key get the cookie.
    const signIn2 = await page.request.post(`${stack.url}/admin/queues/sign-in`, {
      headers: { authorization: `Bearer ${KEYS.alice}` },
    });
    expect(signIn2.status()).toBe(403);
    expect((await page.goto(`${stack.url}/admin/queues/`))?.status()).toBe(401);
    await context.close();
  }, 60_000);

  it('a browser with no key is refused', async () => {
    const { context, page } = await open();
    const res = await page.goto(`${stack.url}/admin/queues/queue/sandbox`);
    expect(res?.status()).toBe(401);
    expect(await page.textContent('body')).toContain('unauthorized');
    await context.close();
  });
});

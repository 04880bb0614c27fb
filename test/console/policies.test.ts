import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

// The console's Policies page in a real browser against a real gateway with the example Cedar
// set: an admin reads the policies and asks what a call would get. A stack of its own: the
// example's rules would change what the other console tests' calls get.
const CHROMIUM = '/usr/bin/chromium';
const DIST = join(import.meta.dirname, '../../console/dist/index.html');
const EXAMPLE = join(import.meta.dirname, '../../examples/cedar');
const reason = existsSync(CHROMIUM)
  ? undefined
  : `${CHROMIUM} is missing (apt-get install chromium; scripts/test.sh does)`;
if (reason) console.warn(`console policies: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('console: Policies page (chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  const problems: string[] = [];

  beforeAll(async () => {
    if (!existsSync(DIST))
      throw new Error('console/dist is not built: run `pnpm --filter @toolgate/console build`');
    stack = await startStack({
      config: {
        clients: [
          { id: 'assistant-a', key: KEYS.alice, tools: ['*'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
        policy: {
          cedar: {
            policies: join(EXAMPLE, 'policies'),
            schema: join(EXAMPLE, 'toolgate.cedarschema'),
          },
        },
      },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.close();
  });

  async function signedIn(key: string): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    await page.goto(`${stack.url}/console/`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Signed in as').waitFor();
    return page;
  }

  it('lists the set and answers "would this call be allowed?"; not shown to client keys', async () => {
    const page = await signedIn(KEYS.admin);
    await page
      .getByRole('navigation', { name: 'Pages' })
      .getByRole('link', { name: 'Policies' })
      .click();
    const hash = (await (await fetch(`${stack.url}/readyz`)).json()).policy.hash as string;
    await page.getByLabel('Policy set').filter({ hasText: hash }).waitFor();
    const row = page.locator('tr[data-policy="support-http-corp-only"]');
    await expect(row.textContent()).resolves.toContain('forbid');
    await expect(row.textContent()).resolves.toContain('@reason("the support assistant may fetch');

    const form = page.getByRole('form', { name: 'Check a call' });
    await form.getByLabel('Client').fill('support-assistant');
    await form.getByLabel('Tool').fill('http_get');
    await form.getByLabel('Arguments (JSON)').fill('{"url": "https://evil.example/"}');
    await form.getByRole('button', { name: 'Check' }).click();
    const decision = page.getByRole('region', { name: 'Decision' });
    await decision.getByText('deny').waitFor();
    await expect(decision.textContent()).resolves.toContain('support-http-corp-only');
    await page.context().close();

    const client = await signedIn(KEYS.alice);
    const nav = client.getByRole('navigation', { name: 'Pages' });
    await nav.getByRole('link', { name: 'Tools' }).waitFor();
    expect(await nav.getByRole('link', { name: 'Policies' }).count()).toBe(0);
    await client.context().close();
    expect(problems).toEqual([]);
  });
});

import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  launchConsoleBrowser,
  noBrowser as reason,
  signedInPage,
} from '../support/console-browser.js';
import { KEYS, startStack, type Stack } from '../support/stack.js';

// The console's Policies page in a real browser against a real gateway with the example Cedar
// set: an admin reads the policies and asks what a call would get. A stack of its own: the
// example's rules would change what the other console tests' calls get.
const EXAMPLE = join(import.meta.dirname, '../../examples/cedar');
if (reason) console.warn(`console policies: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('console: Policies page (chromium)', () => {
  let stack: Stack;
  let browser: Browser;
  const problems: string[] = [];

  beforeAll(async () => {
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
    browser = await launchConsoleBrowser();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.close();
  });

  function signedIn(key: string): Promise<Page> {
    return signedInPage(browser, stack.url, key, problems);
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

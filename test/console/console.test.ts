import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ToolServices } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import {
  chromium,
  type Browser,
  type BrowserContext,
  type Locator,
  type Page,
} from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

// The operator console in a real browser (Debian's chromium driven by playwright-core) against
// a real gateway, worker, Redis and sandbox: what an operator sees and clicks.
const CHROMIUM = '/usr/bin/chromium';
/** A second operator, for two decisions at once. */
const OPS2_KEY = 'ops2-key-0123456789abcdef0';
const ROOT = join(import.meta.dirname, '../..');
const DIST = join(ROOT, 'console/dist/index.html');
const SHOTS = process.env.CONSOLE_SCREENSHOTS === '1' ? join(ROOT, 'docs/console') : undefined;

const noBrowser = existsSync(CHROMIUM)
  ? undefined
  : `${CHROMIUM} is missing (apt-get install chromium; scripts/test.sh does)`;
const driver = (await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap';
const noSandbox = await whyDriverUnavailable(driver);
const reason = noBrowser ?? noSandbox;
if (reason) console.warn(`console: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('operator console (chromium)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let browser: Browser;
  /** Every console message and page error of every page: CSP violations show up here. */
  const problems: string[] = [];

  beforeAll(async () => {
    if (!existsSync(DIST))
      throw new Error(
        'console/dist is not built: run `pnpm --filter @toolgate/console build` (scripts/test.sh does)',
      );
    dir = mkdtempSync(join(tmpdir(), 'toolgate-console-'));
    sandbox = await createSandbox(testSandboxConfig(driver, dir), {
      ownerId: `console-test-${process.pid}`,
    });
    await sandbox.start();
    stack = await startStack({
      // startStack adds the other services as the worker's main.ts does.
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) } as ToolServices,
      config: {
        policy: { approval: { tools: ['file_delete'] } },
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'] },
          { id: 'bob', key: KEYS.bob, tools: ['current_time', 'category:math'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
          { id: 'ops2', key: OPS2_KEY, tools: ['*'], admin: true },
        ],
      },
    });
    // launch() gives the browser a fresh temporary profile of its own, removed on close.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    if (SHOTS) mkdirSync(SHOTS, { recursive: true });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.close();
    await sandbox?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function open(
    viewport = { width: 1280, height: 800 },
  ): Promise<{ context: BrowserContext; page: Page }> {
    const context = await browser.newContext({ viewport });
    context.setDefaultTimeout(10_000);
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

  const shot = async (page: Page, name: string) => {
    if (SHOTS) await page.screenshot({ path: join(SHOTS, `${name}.png`) });
  };

  /** Parks a file_delete by alice (through the API, as an assistant would). */
  async function parkDelete(path: string): Promise<string> {
    const write = await stack.call('/tools/file_write/execute', {
      json: { path, content: 'to be deleted' },
    });
    expect(((await write.json()) as { status: string }).status).toBe('ok');
    const res = await stack.call('/tools/file_delete/execute', { json: { path } });
    expect(res.status).toBe(202);
    const body = (await res.json()) as { id: string; status: string };
    expect(body.status).toBe('pending_approval');
    return body.id;
  }

  const callStatus = async (id: string) =>
    (
      (await (await stack.call(`/v1/calls/${id}`, { key: KEYS.admin })).json()) as {
        status: string;
      }
    ).status;

  it('is served at /console under the strict CSP, with no inline script or style', async () => {
    const res = await fetch(`${stack.url}/console/`);
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("style-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    const html = await res.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|\sstyle=/);
  });

  it('signs in with an admin key and shows every page; a bad key is refused', async () => {
    const { context, page } = await open();
    await page.goto(`${stack.url}/console/`);
    await shot(page, 'sign-in');
    await page.getByLabel('API key').fill('not-a-key-0000000000000000');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('That key was not accepted.').waitFor();

    // By keyboard alone: type the key, Enter submits.
    await page.getByLabel('API key').fill('');
    await page.getByLabel('API key').focus();
    await page.keyboard.type(KEYS.admin);
    await page.keyboard.press('Enter');
    await page.getByText('Signed in as').waitFor();
    expect(await page.locator('.who').textContent()).toContain('ops (admin)');
    // The key is in this tab's session storage, never in the URL.
    expect(page.url()).not.toContain(KEYS.admin);
    expect(await page.evaluate(() => sessionStorage.getItem('toolgate.key'))).toBe(KEYS.admin);
    const nav = page.getByRole('navigation', { name: 'Pages' });
    for (const name of ['Overview', 'Approvals', 'Calls', 'Tools'])
      await nav.getByRole('link', { name }).waitFor();

    // The overview's charts draw under the CSP (uPlot styles through the CSSOM only).
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page.locator('.uplot canvas').first().waitFor();
    expect(await page.locator('.uplot').count()).toBe(5);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API key').waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem('toolgate.key'))).toBeNull();
    await context.close();
  });

  it('a parked file_delete appears in Approvals without a reload; Approve runs it: ok', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    await page.getByRole('link', { name: 'Approvals' }).click();
    await page.getByText('Live: updates').waitFor();

    const id = await parkDelete('doomed.txt');
    const card = page.getByRole('listitem', { name: `file_delete call ${id}` });
    await card.waitFor({ timeout: 10_000 });
    await expect(card.textContent()).resolves.toContain('alice');
    await expect(card.textContent()).resolves.toContain('doomed.txt');
    // Each client's parked calls against its limits.pendingApprovals (default 16).
    const perClient = page.getByRole('table', { name: 'Pending approvals per client' });
    await expect(
      perClient.getByRole('row').filter({ hasText: 'alice' }).textContent(),
    ).resolves.toBe('alice116');
    await shot(page, 'approvals');

    await card.getByRole('button', { name: 'Approve' }).click();
    const decided = page
      .getByRole('list', { name: 'Decided approvals' })
      .getByRole('listitem', { name: `file_delete call ${id}` });
    await decided.getByText('approved by ops').waitFor();
    await decided.locator('.status-ok').waitFor({ timeout: 20_000 });
    expect(await callStatus(id)).toBe('ok');

    // The call's page says the same, with who approved it and the audit entries.
    await decided.getByRole('link', { name: `details of call ${id}` }).click();
    await page.getByTestId('call-status').getByText('ok').waitFor();
    await page.getByText('approved by ops').waitFor();
    await page.getByRole('heading', { name: 'Audit entries' }).waitFor();
    await page.getByRole('cell', { name: 'approval' }).first().waitFor();
    await shot(page, 'call-detail');
    await context.close();
  }, 60_000);

  it('Reject with a reason: the call is rejected, and shows it', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    await page.goto(`${stack.url}/console/#/approvals`);
    await page.getByText('Live: updates').waitFor();
    const id = await parkDelete('kept.txt');
    const card = page.getByRole('listitem', { name: `file_delete call ${id}` });
    await card.getByRole('button', { name: 'Reject' }).click();
    await card.getByLabel('Reason (optional)').fill('not today');
    await card.getByRole('button', { name: 'Confirm reject' }).click();
    const decided = page
      .getByRole('list', { name: 'Decided approvals' })
      .getByRole('listitem', { name: `file_delete call ${id}` });
    await decided.getByText('rejected').first().waitFor();
    await decided.getByText('not today').waitFor();
    expect(await callStatus(id)).toBe('rejected');

    // In the Calls table too, with the rejected status.
    await page.getByRole('link', { name: 'Calls' }).click();
    const row = page.locator(`tr[data-call-id="${id}"]`);
    await row.locator('.status-rejected').waitFor();
    await shot(page, 'calls');
    await context.close();
  }, 60_000);

  it('two operators decide at once: one wins, the other is told it was already decided', async () => {
    const first = await open();
    const second = await open();
    await signIn(first.page, KEYS.admin);
    await signIn(second.page, OPS2_KEY);
    for (const { page } of [first, second]) {
      await page.goto(`${stack.url}/console/#/approvals`);
      await page.getByText('Live: updates').waitFor();
    }
    const id = await parkDelete('raced.txt');
    const [card1, card2] = [first, second].map(({ page }) =>
      page.getByRole('listitem', { name: `file_delete call ${id}` }),
    ) as [Locator, Locator];
    await card1.waitFor();
    await card2.waitFor();
    // Both click; the second operator's approve reaches the gateway just after the first's
    // reject has been decided (held in that browser until then), as the slower click would.
    let firstDecided!: () => void;
    const decided = new Promise<void>((resolve) => (firstDecided = resolve));
    first.page.on('response', (r) => {
      if (r.url().endsWith(`/v1/approvals/${id}/reject`)) firstDecided();
    });
    await second.page.route(`**/v1/approvals/${id}/approve`, async (route) => {
      await decided;
      await route.continue();
    });
    await card1.getByRole('button', { name: 'Reject' }).click();
    await card1.getByLabel('Reason (optional)').fill('too risky');
    await card2.getByRole('button', { name: 'Approve' }).click();
    await card1.getByRole('button', { name: 'Confirm reject' }).click();

    const outcome = (page: Page) =>
      page
        .getByRole('list', { name: 'Decided approvals' })
        .getByRole('listitem', { name: `file_delete call ${id}` });
    await outcome(second.page).getByText('rejected by ops').waitFor();
    await outcome(second.page).getByText('Already decided: another operator was first').waitFor();
    await outcome(first.page).getByText('rejected by ops').waitFor();
    expect(await first.page.getByText('Already decided').count()).toBe(0);
    expect(await callStatus(id)).toBe('rejected');
    await first.context.close();
    await second.context.close();
  }, 60_000);

  it('a client key sees only its own calls, and no Approvals', async () => {
    // alice has calls (above); bob makes one.
    const mine = await stack.call('/tools/calculator/execute', {
      key: KEYS.bob,
      json: { expression: '6*7' },
    });
    const bobCall = ((await mine.json()) as { id: string }).id;
    const { context, page } = await open();
    await signIn(page, KEYS.bob);
    const nav = page.getByRole('navigation', { name: 'Pages' });
    await nav.getByRole('link', { name: 'Calls' }).waitFor();
    expect(await nav.getByRole('link', { name: 'Approvals' }).count()).toBe(0);

    await page.goto(`${stack.url}/console/#/approvals`);
    await page.getByText('Approvals are for admins only').waitFor();

    await page.goto(`${stack.url}/console/#/calls`);
    await page.locator(`tr[data-call-id="${bobCall}"]`).waitFor();
    const clients = await page.locator('tbody tr td:nth-child(3)').allTextContents();
    expect(clients.length).toBeGreaterThan(0);
    expect(new Set(clients)).toEqual(new Set(['bob']));
    // No client filter for a client key: it could only ever show its own.
    expect(await page.getByLabel('Client').count()).toBe(0);
    await context.close();
  }, 60_000);

  it('the Calls page filters by user: a user with no calls lists none; the table has a User column', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    await page.goto(`${stack.url}/console/#/calls`);
    await page.locator('tbody tr').first().waitFor();
    await page.getByRole('columnheader', { name: 'User' }).waitFor();
    await page.getByLabel('User').fill('nobody-has-this-user');
    await page.getByLabel('User').press('Tab');
    await page.getByText('No call matches.').waitFor();
    expect(await page.locator('tbody tr').count()).toBe(0);
    await context.close();
  }, 60_000);

  it('the Tools form runs calculator', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.bob);
    await page.getByRole('link', { name: 'Tools' }).click();
    await page
      .getByRole('navigation', { name: 'Tools' })
      .getByRole('link', { name: 'calculator' })
      .click();
    await page.getByLabel(/^expression/).fill('2*(3+4)');
    await page.getByRole('button', { name: 'Run' }).click();
    const answer = page.getByRole('region', { name: 'Answer' });
    await answer.locator('.status-ok').waitFor();
    await expect(answer.getByLabel('Result').textContent()).resolves.toContain('14');
    await shot(page, 'tools');
    await context.close();
  }, 60_000);

  it('reads at phone width', async () => {
    const { context, page } = await open({ width: 390, height: 844 });
    await signIn(page, KEYS.admin);
    await page.goto(`${stack.url}/console/#/approvals`);
    await page.getByText('Live: updates').waitFor();
    const id = await parkDelete('phone.txt');
    await page.getByRole('listitem', { name: `file_delete call ${id}` }).waitFor();
    // Nothing wider than the screen: no sideways scrolling of the page.
    const width = await page.evaluate<number>('document.documentElement.scrollWidth');
    expect(width).toBeLessThanOrEqual(390);
    await shot(page, 'phone-approvals');
    expect((await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' })).status).toBe(200);
    await page.getByText('No call is waiting for approval.').waitFor();
    await context.close();
  }, 60_000);

  it("a running sandboxed call's detail shows its output live, then its result", async () => {
    // Signed in first: the call's second line is 4 s away once it starts.
    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    const res = await stack.call('/tools/run_shell/execute?wait=false', {
      json: { command: 'echo first-line; sleep 4; echo second-line' },
    });
    const { id } = (await res.json()) as { id: string };
    await page.goto(`${stack.url}/console/#/calls/${id}`);
    const output = page.getByLabel('Live output');
    await output.getByText('first-line').waitFor();
    // Seen while the call still runs: the page did not wait for the end.
    expect(await output.textContent()).not.toContain('second-line');
    await page.getByTestId('call-status').getByText('ok').waitFor();
    await page.getByLabel('Result').getByText('second-line').waitFor();
    await context.close();
  }, 60_000);

  it('the Overview charts the calls made above', async () => {
    const { context, page } = await open();
    await signIn(page, KEYS.admin);
    const total = page.getByRole('definition').first();
    await total.waitFor();
    // The page read /v1/series: the calls of the tests above are in the last hour's counts.
    expect(Number(await total.textContent())).toBeGreaterThanOrEqual(5);
    await page.locator('.uplot canvas').first().waitFor();
    await shot(page, 'overview');
    await context.close();
  });

  it('ran without CSP violations or page errors', () => {
    // The refusals the tests ask for (the bad key: 401, the lost race: 409) are logged by the
    // browser; nothing else may be.
    expect(problems.filter((p) => !/status of (401|409)/.test(p))).toEqual([]);
  });
});

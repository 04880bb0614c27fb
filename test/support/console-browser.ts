/**
 * The console in a real browser: Debian's chromium driven by playwright-core (no browser
 * download), and a page signed in with a key that records the browser's errors and warnings.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
const DIST = join(import.meta.dirname, '../../console/dist/index.html');

/** Why the browser tests cannot run here, or undefined. */
export const noBrowser = existsSync(CHROMIUM)
  ? undefined
  : `${CHROMIUM} is missing (apt-get install chromium; scripts/test.sh does)`;

/** Chromium, headless; throws when console/dist is not built (the gateway serves it). */
export async function launchConsoleBrowser(): Promise<Browser> {
  if (!existsSync(DIST))
    throw new Error('console/dist is not built: run `pnpm --filter @toolgate/console build`');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
}

/**
 * A new page on the console at `url`, signed in with `key`; the browser's errors and warnings
 * (console messages, uncaught exceptions) go to `problems`.
 */
export async function signedInPage(
  browser: Browser,
  url: string,
  key: string,
  problems: string[],
): Promise<Page> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(10_000);
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(`${url}/console/`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('Signed in as').waitFor();
  return page;
}

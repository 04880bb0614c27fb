/**
 * A secret nobody set, end to end (issue 22 §3): an MCP client of 2025-11-25 that declared
 * URL-mode elicitation is sent to the console's Connect page for the secret (others read the
 * `credential_missing` tool error); an admin sets it there in a real browser and the retried
 * call carries it. The Secrets page lists a client's names and update times, sets and deletes.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { join } from 'node:path';
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

const CHROMIUM = '/usr/bin/chromium';
const DIST = join(import.meta.dirname, '../../console/dist/index.html');
const reason = existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing`;
if (reason) console.warn(`console secrets: skipped, ${reason}`);
/** A value shaped like nothing the redaction rules know. */
const VALUE = `tgs-${randomBytes(12).toString('hex')}`;

describe.skipIf(reason !== undefined)(
  'credential_missing → Connect; the Secrets page (chromium)',
  () => {
    let stack: Stack;
    let browser: Browser;
    let echo: Server;
    let port: number;
    const seen: IncomingHttpHeaders[] = [];
    const problems: string[] = [];
    const clients: { close(): Promise<void> }[] = [];

    beforeAll(async () => {
      if (!existsSync(DIST))
        throw new Error('console/dist is not built: run `pnpm --filter @toolgate/console build`');
      echo = createServer((req, res) => {
        seen.push(req.headers);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      });
      await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
      port = (echo.address() as { port: number }).port;
      stack = await startStack({
        config: {
          credentials: [
            // The echo server is plain http on its own port: the rule says so (a bare host
            // would mean https on 443).
            {
              host: `http://localhost:${port}`,
              header: 'Authorization',
              value: 'Bearer ${secret:gh_token}',
            },
          ],
          secrets: { key: randomBytes(32).toString('base64') },
          policy: { http: { allowHosts: [`localhost:${port}`] } },
        },
      });
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
      });
    }, 120_000);

    afterAll(async () => {
      await Promise.all(clients.map((c) => c.close()));
      await browser?.close();
      await stack?.close();
      echo?.close();
    });

    /** A 2025-era MCP client (the SDK negotiates 2025-11-25), with URL elicitation or without. */
    async function mcp(urlElicitation: boolean, key: string = KEYS.alice): Promise<Client> {
      const client = new Client(
        { name: 'toolgate-test', version: '1.0.0' },
        { capabilities: urlElicitation ? { elicitation: { url: {} } } : {} },
      );
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${key}` } },
        }),
      );
      clients.push(client);
      return client;
    }
    const fetchEcho = (client: Client) =>
      client.callTool({ name: 'http_get', arguments: { url: `http://localhost:${port}/data` } });

    async function signedIn(path: string, key: string): Promise<Page> {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      context.setDefaultTimeout(10_000);
      const page = await context.newPage();
      page.on('console', (m) => {
        if (m.type() === 'error') problems.push(m.text());
      });
      page.on('pageerror', (e) => problems.push(e.message));
      await page.goto(`${stack.url}${path}`);
      await page.getByLabel('API key').fill(key);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByText('Signed in as').waitFor();
      return page;
    }

    it('a client that declared URL elicitation is sent to Connect; an admin sets the secret there; the retry carries it', async () => {
      const plain = await mcp(false);
      const result = (await fetchEcho(plain)) as { isError?: boolean; content: { text: string }[] };
      expect(result.isError).toBe(true);
      expect(result.content[0]!.text).toContain('credential_missing');

      const eliciting = await mcp(true);
      const refused = await fetchEcho(eliciting).then(
        () => undefined,
        (e: unknown) => e as { code: number; data: { elicitations: Record<string, unknown>[] } },
      );
      expect(refused?.code).toBe(-32042);
      const [elicitation] = refused!.data.elicitations;
      const url = `${stack.url}/console/#/connect/alice/gh_token`;
      expect(elicitation).toMatchObject({ mode: 'url', url, elicitationId: expect.any(String) });
      expect(elicitation!['message']).toContain('"gh_token"');
      expect(seen).toHaveLength(0);

      // A client key is told an admin sets it, and cannot.
      const asClient = await signedIn('/console/#/connect/alice/gh_token', KEYS.alice);
      await asClient.getByText('Admins only').waitFor();
      expect(await asClient.getByLabel('Value of gh_token').count()).toBe(0);
      await asClient.context().close();

      const page = await signedIn(new URL(url).pathname + new URL(url).hash, KEYS.admin);
      await page.getByRole('heading', { name: 'Connect: gh_token' }).waitFor();
      await page.getByLabel('Value of gh_token').fill(VALUE);
      await page.getByRole('button', { name: 'Save' }).click();
      await page.getByText('Go back to the assistant').waitFor();
      expect(await page.content()).not.toContain(VALUE);
      await page.context().close();

      const retried = (await fetchEcho(eliciting)) as { isError?: boolean };
      expect(retried.isError).toBeUndefined();
      expect(seen.at(-1)?.authorization).toBe(`Bearer ${VALUE}`);
      expect(problems).toEqual([]);
    }, 60_000);

    it('a 2026-07-28 client is asked for the URL as an input request, and its retry runs once the secret is set', async () => {
      const removed = await stack.call('/v1/secrets/alice/gh_token', {
        key: KEYS.admin,
        method: 'DELETE',
      });
      expect(removed.status).toBe(204);
      const modern = new ModernClient(
        { name: 'toolgate-test-modern', version: '1.0.0' },
        {
          versionNegotiation: { mode: { pin: '2026-07-28' } },
          capabilities: { elicitation: { url: {} } },
        },
      );
      const asked: { mode?: string; url?: string; message: string }[] = [];
      // The user opening the link and an admin setting the secret there, as the first test does
      // in the browser.
      modern.setRequestHandler('elicitation/create', async (request) => {
        asked.push(request.params as (typeof asked)[number]);
        await stack.call('/v1/secrets/alice/gh_token', {
          key: KEYS.admin,
          method: 'PUT',
          json: { value: `${VALUE}-2` },
        });
        return { action: 'accept' };
      });
      await modern.connect(
        new ModernTransport(new URL(`${stack.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
        }),
      );
      clients.push(modern);
      const before = seen.length;
      const result = (await modern.callTool({
        name: 'http_get',
        arguments: { url: `http://localhost:${port}/data` },
      })) as { isError?: boolean };
      expect(asked).toEqual([
        expect.objectContaining({
          mode: 'url',
          url: `${stack.url}/console/#/connect/alice/gh_token`,
        }),
      ]);
      expect(result.isError).toBeUndefined();
      expect(seen.slice(before).map((h) => h.authorization)).toEqual([`Bearer ${VALUE}-2`]);
    }, 60_000);

    it('the Secrets page lists names and update times, sets and deletes, and shows no value', async () => {
      await stack.call('/v1/secrets/alice/listed_one', {
        key: KEYS.admin,
        method: 'PUT',
        json: { value: VALUE },
      });
      const page = await signedIn('/console/', KEYS.admin);
      await page.getByRole('link', { name: 'Secrets' }).click();
      await page.getByLabel('Client').fill('alice');
      await page.getByRole('button', { name: 'Show' }).click();
      const row = page.locator('tr[data-secret="listed_one"]');
      await row.waitFor();
      expect(await row.textContent()).toMatch(/listed_one.*\d/);

      const form = page.getByRole('form', { name: 'Set a secret' });
      await form.getByLabel('Name').fill('added_here');
      await form.getByLabel('Value').fill('v-added');
      await form.getByRole('button', { name: 'Set' }).click();
      await page.locator('tr[data-secret="added_here"]').waitFor();

      await row.getByRole('button', { name: 'Delete secret listed_one' }).click();
      await row.waitFor({ state: 'detached' });
      const listed = (await (
        await stack.call('/v1/secrets/alice', { key: KEYS.admin })
      ).json()) as {
        secrets: { name: string }[];
      };
      expect(listed.secrets.map((s) => s.name).sort()).toEqual(['added_here', 'gh_token']);
      expect(await page.content()).not.toContain(VALUE);
      expect(problems).toEqual([]);
      await page.context().close();
    }, 60_000);
  },
);

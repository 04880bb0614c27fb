/**
 * Hostile upstreams against the catalog (docs/upstreams.md, "The catalog"): tool names that
 * collide once sanitised, next to an `approval:` entry for one of them; and a `list_changed`
 * flood with pages of megabytes. Real Redis, real gateway and worker, upstreams over
 * Streamable HTTP on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { startTestUpstream, type TestUpstream } from './support/test-upstream.js';
import { startFloodUpstream, type FloodUpstream } from './support/flood-upstream.js';

interface UpstreamReport {
  id: string;
  leftOut: { count: number; problems: string[] };
  tools: { tool: string; name: string; status: string; leftOut?: string }[];
}

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('an upstream whose tool names collide once sanitised', () => {
  let stack: Stack;
  let clash: TestUpstream;

  beforeAll(async () => {
    // `create.issue` sorts before `create_issue`: today it took the name, without approval.
    clash = await startTestUpstream({
      extraTools: ['create.issue', 'create_issue', 'close_issue'],
    });
    stack = await startStack({
      config: {
        policy: { http: { allowHosts: ['127.0.0.1'] } },
        upstreams: [
          {
            id: 'clash',
            url: clash.url,
            trust: 'auto',
            approval: ['create_issue', 'close.issue'],
          },
        ],
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    await clash?.close();
  });

  it('serves neither of two tools that become one name, and says why in leftOut', async () => {
    const listed = (await (await stack.call('/tools')).json()) as {
      name: string;
      requiresApproval: boolean;
    }[];
    const names = listed.map((t) => t.name);
    expect(names).toContain('clash__echo');
    expect(names).not.toContain('clash__create_issue');

    const calls = clash.metas.length;
    const res = await stack.call('/tools/clash__create_issue/execute', { json: {} });
    const body = (await res.json()) as { status?: string; error?: { code: string } };
    expect(body.status).not.toBe('ok');
    expect(body.error?.code).toBe('unknown_tool');
    expect(clash.metas.length).toBe(calls); // nothing reached the upstream

    const report = (await (
      await stack.call('/v1/upstreams', { key: KEYS.admin })
    ).json()) as UpstreamReport[];
    const up = report.find((u) => u.id === 'clash')!;
    expect(up.leftOut.count).toBe(2);
    expect(up.leftOut.problems).toEqual([
      'upstream "clash" tools "create.issue" and "create_issue" both become "clash__create_issue": none of them is served',
    ]);
    // each one's entry says so too: neither is served whatever its status
    expect(up.tools.filter((t) => t.leftOut !== undefined)).toEqual([
      expect.objectContaining({
        tool: 'create.issue',
        leftOut: 'not served: "create_issue" becomes the same name',
      }),
      expect.objectContaining({
        tool: 'create_issue',
        leftOut: 'not served: "create.issue" becomes the same name',
      }),
    ]);
  });

  it('matches an `approval:` entry on the toolgate name', async () => {
    const listed = (await (await stack.call('/tools')).json()) as {
      name: string;
      requiresApproval: boolean;
    }[];
    // `close.issue` in the config names the upstream's `close_issue`: one name to a model.
    expect(listed.find((t) => t.name === 'clash__close_issue')?.requiresApproval).toBe(true);
    expect(listed.find((t) => t.name === 'clash__echo')?.requiresApproval).toBe(false);
    const calls = clash.metas.length;
    const res = await stack.call('/tools/clash__close_issue/execute?wait=false', { json: {} });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ status: 'pending_approval' });
    expect(clash.metas.length).toBe(calls);
  });
});

describe('a list_changed flood with pages of megabytes', () => {
  const REFRESH_SECONDS = 2;
  const WINDOW_MS = 8000;
  let stack: Stack;
  let flood: FloodUpstream;
  let wide: FloodUpstream;

  beforeAll(async () => {
    [flood, wide] = await Promise.all([
      startFloodUpstream({ pages: 4, pageBytes: 7_000_000, everyMs: 50 }),
      // No flood, but 4 pages of 7 MB of tools over 64 KiB each: none is kept, so only the
      // listing's own byte budget stops the reading.
      startFloodUpstream({ pages: 4, pageBytes: 7_000_000, everyMs: 0, toolBytes: 100_000 }),
    ]);
    stack = await startStack({
      config: {
        policy: { http: { allowHosts: ['127.0.0.1'] } },
        upstreams: [
          { id: 'flood', url: flood.url, trust: 'auto', refreshSeconds: REFRESH_SECONDS },
          { id: 'wide', url: wide.url, trust: 'auto' },
        ],
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    await Promise.all([flood?.close(), wide?.close()]);
  });

  it('reads at most 8 MiB of tools/list answers per refresh, across pages', async () => {
    // The second page is cut where the 8 MiB end; the third and fourth are never asked for.
    expect(wide.lists).toEqual([null, '1']);
    const report = (await (
      await stack.call('/v1/upstreams', { key: KEYS.admin })
    ).json()) as UpstreamReport[];
    const up = report.find((u) => u.id === 'wide')!;
    // Said first, ahead of the 70 definitions over 64 KiB on the first page.
    expect(up.leftOut.problems[0]).toBe(
      'the tools/list answers passed 8388608 bytes at page 2: it and later pages are left out',
    );
    expect(up.leftOut.problems).toHaveLength(20);
  });

  it('reads the list at most once per refreshSeconds, one page of it, at a small CPU cost', async () => {
    // The session's event stream is open and the notifications arrive.
    await until(
      () => flood.notified,
      (n) => n > 20,
    );
    const lists = flood.lists.length;
    const notified = flood.notified;
    const cpu = process.cpuUsage();
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    const used = process.cpuUsage(cpu);
    const elapsed = Date.now() - t0;
    const read = flood.lists.slice(lists);

    expect(flood.notified - notified).toBeGreaterThan(40); // the flood went on all along
    // Coalesced: one refresh per window (plus one for a window cut by the edges), not one per
    // notification; and still read (the notifications are not dropped).
    expect(read.length).toBeGreaterThanOrEqual(1);
    expect(read.length).toBeLessThanOrEqual(Math.ceil(elapsed / (REFRESH_SECONDS * 1000)) + 1);
    // The first page (7 MB) spends the catalog's 2 MiB: the next pages are never asked for.
    expect(read.every((cursor) => cursor === null)).toBe(true);
    // This process runs the gateway, the worker and the upstream: a quarter of one core at
    // most (continuous refreshing took it all).
    expect((used.user + used.system) / 1000).toBeLessThan(elapsed * 0.25);

    const report = (await (
      await stack.call('/v1/upstreams', { key: KEYS.admin })
    ).json()) as UpstreamReport[];
    const up = report.find((u) => u.id === 'flood')!;
    expect(up.leftOut.problems).toEqual([
      'the catalog passed 2097152 bytes: the pages after page 1 are not read',
      'the catalog passed 2097152 bytes at "p0t0034": it and later tools are left out',
    ]);
  }, 30_000);
});

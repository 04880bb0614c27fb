// The example policies of examples/cedar against the real Cedar engine: the folder must load
// (CI checks it here), and each rule of docs/policy.md decides as written.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLogger } from '@toolgate/log';
import { afterAll, describe, expect, it } from 'vitest';
import { PolicyEngine } from './engine.js';
import { PolicyContextError, PolicySetError } from './errors.js';
import type { PolicyRequest, PolicyTool } from './context.js';
import { MAX_ARGS_DEPTH, MAX_ARGS_VALUES, argsRecord } from './context.js';

const EXAMPLE = fileURLToPath(new URL('../../../examples/cedar/', import.meta.url));
const logger = createLogger('test', { level: 'silent' });
const example = () =>
  new PolicyEngine({
    policies: join(EXAMPLE, 'policies'),
    schema: join(EXAMPLE, 'toolgate.cedarschema'),
    logger,
  });

const tool = (name: string, over: Partial<PolicyTool> = {}): PolicyTool => ({
  name,
  category: 'web',
  readOnly: false,
  destructive: false,
  ...over,
});
const call = (over: Partial<PolicyRequest> & Pick<PolicyRequest, 'tool'>): PolicyRequest => ({
  action: 'call',
  principal: { client: 'assistant-a' },
  args: {},
  sourceIp: '127.0.0.1',
  ...over,
});

describe('examples/cedar', () => {
  const engine = example();

  it('loads and validates against its schema', () => {
    expect(engine.list().map((p) => p.id)).toContain('support-http-corp-only');
    expect(engine.state().hash).toMatch(/^[0-9a-f]{16}$/);
  });

  it('the support assistant may http_get only *.corp.example', () => {
    const support = { client: 'support-assistant' };
    const get = (url: string) =>
      engine.decide(call({ principal: support, tool: tool('http_get'), args: { url } }));
    expect(get('https://wiki.corp.example/page').decision).toBe('allow');
    for (const url of [
      'https://example.com/',
      'https://evil.com/x.corp.example/',
      'https://evil.com?.corp.example/',
      'https://corp.example.evil.com/',
      'https://wiki.corp.example@evil.com/',
    ]) {
      const d = get(url);
      expect(d, url).toMatchObject({
        decision: 'deny',
        policies: ['support-http-corp-only'],
        reason: 'the support assistant may fetch only https://*.corp.example/ addresses',
      });
    }
    // Another client is not bound by the rule.
    expect(
      engine.decide(call({ tool: tool('http_get'), args: { url: 'https://example.com/' } }))
        .decision,
    ).toBe('allow');
  });

  it("github__create_issue only in the repositories of the user's team (token groups)", () => {
    const issue = tool('github__create_issue', { category: 'upstream:github', upstream: 'github' });
    const alice = { client: 'assistant-a', user: 'alice', groups: ['platform'] };
    expect(
      engine.decide(call({ principal: alice, tool: issue, args: { repo: 'platform/api' } }))
        .decision,
    ).toBe('allow');
    expect(
      engine.decide(call({ principal: alice, tool: issue, args: { repo: 'payments/ledger' } })),
    ).toMatchObject({
      decision: 'deny',
      policies: ['github-issues-own-team'],
    });
    const bob = { client: 'assistant-a', user: 'bob', groups: ['payments'] };
    expect(
      engine.decide(call({ principal: bob, tool: issue, args: { repo: 'payments/ledger' } }))
        .decision,
    ).toBe('allow');
  });

  it('file_delete needs approval except in scratch/', () => {
    const del = tool('file_delete', { category: 'files', destructive: true });
    expect(engine.decide(call({ tool: del, args: { path: 'scratch/tmp.txt' } }))).toMatchObject({
      decision: 'allow',
      policies: ['file-delete-scratch'],
    });
    for (const path of ['report.txt', 'scratch/../report.txt']) {
      expect(engine.decide(call({ tool: del, args: { path } })), path).toMatchObject({
        decision: 'approval',
        policies: ['file-delete-approval'],
      });
    }
  });

  it('no run_shell from code mode', () => {
    const shell = tool('run_shell', { category: 'code' });
    expect(engine.decide(call({ tool: shell, args: { command: 'ls' } })).decision).toBe('allow');
    expect(
      engine.decide(
        call({ tool: shell, args: { command: 'ls' }, codeMode: { parentTool: 'run_code' } }),
      ),
    ).toMatchObject({
      decision: 'deny',
      policies: ['no-shell-in-code-mode'],
      reason: 'run_shell cannot be called from code mode',
    });
  });

  it('past 80 % of the sandbox time, run_python needs approval', () => {
    const py = tool('run_python', { category: 'code' });
    const at = (used: number) =>
      engine.decide(
        call({ tool: py, args: { code: '1' }, budget: { sandboxSeconds: { used, limit: 1000 } } }),
      );
    expect(at(799).decision).toBe('allow');
    expect(at(800)).toMatchObject({ decision: 'approval', policies: ['run-python-over-80'] });
    expect(engine.decide(call({ tool: py, args: { code: '1' } })).decision).toBe('allow');
  });

  it('an admin approving is an action of its own', () => {
    const d = engine.decide({
      ...call({ tool: tool('file_delete', { destructive: true }) }),
      action: 'approve',
    });
    expect(d).toMatchObject({ decision: 'allow', policies: ['approve'] });
  });

  it('listings leave out only what no call could be permitted', () => {
    const support = { client: 'support-assistant' };
    // Forbidden for some URLs only: listed.
    expect(engine.listable(support, tool('http_get')).listed).toBe(true);
  });
});

describe('policy sets', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  const folder = (files: Record<string, string>) => {
    const dir = mkdtempSync(join(tmpdir(), 'cedar-'));
    dirs.push(dir);
    cpSync(join(EXAMPLE, 'toolgate.cedarschema'), join(dir, 'schema.cedarschema'));
    const policies = join(dir, 'policies');
    cpSync(join(EXAMPLE, 'policies'), policies, { recursive: true });
    for (const [name, text] of Object.entries(files)) writeFileSync(join(policies, name), text);
    return { policies, schema: join(dir, 'schema.cedarschema') };
  };

  it('a file that is not Cedar is refused with its name and line', () => {
    const src = folder({
      'broken.cedar': 'permit(principal, action, resource);\nthis is not cedar\n',
    });
    expect(() => new PolicyEngine({ ...src, logger })).toThrow(PolicySetError);
    expect(() => new PolicyEngine({ ...src, logger })).toThrow(/broken\.cedar: line 2/);
  });

  it('a policy that does not validate against the schema is refused naming it', () => {
    const src = folder({
      'bad.cedar':
        '@id("typo") forbid(principal, action, resource) when { context.args.nope == 1 };',
    });
    expect(() => new PolicyEngine({ ...src, logger })).toThrow(/bad\.cedar \(typo\)/);
  });

  it('a policy that errors at evaluation is skipped, and a forbid that errors denies', () => {
    // Long overflow: a runtime error Cedar's validator does not catch.
    const src = folder({
      'overflow.cedar': `@id("overflowing-forbid") forbid(principal, action == Toolgate::Action::"call", resource == Toolgate::Tool::"calculator")
        when { context.budget has calls && context.budget.calls.used * 9223372036854775807 > 0 };`,
    });
    const errors: string[] = [];
    const engine = new PolicyEngine({ ...src, logger, onEvaluationError: (id) => errors.push(id) });
    const d = engine.decide(
      call({ tool: tool('calculator'), budget: { calls: { used: 2, limit: 10 } } }),
    );
    expect(d).toMatchObject({
      decision: 'deny',
      policies: ['overflowing-forbid'],
      errors: ['overflowing-forbid'],
    });
    expect(errors).toEqual(['overflowing-forbid']);
  });

  it('a bad new set is refused and the last good set keeps deciding', () => {
    const src = folder({});
    const results: boolean[] = [];
    const engine = new PolicyEngine({ ...src, logger, onReload: (r) => results.push(r.ok) });
    const good = engine.state().hash;
    writeFileSync(join(src.policies, 'new.cedar'), 'forbid(principal, action, resource) when {');
    expect(engine.reload()).toBe(false);
    expect(engine.state()).toMatchObject({
      hash: good,
      lastError: expect.stringMatching(/new\.cedar/),
    });
    expect(engine.decide(call({ tool: tool('calculator') })).decision).toBe('allow');
    writeFileSync(
      join(src.policies, 'new.cedar'),
      '@id("no-calc") forbid(principal, action, resource == Toolgate::Tool::"calculator");',
    );
    expect(engine.reload()).toBe(true);
    expect(engine.state().hash).not.toBe(good);
    expect(engine.state().lastError).toBeUndefined();
    expect(engine.decide(call({ tool: tool('calculator') })).decision).toBe('deny');
    expect(engine.listable({ client: 'a' }, tool('calculator'))).toMatchObject({
      listed: false,
      policies: ['no-calc'],
    });
    expect(results).toEqual([false, true]);
  });
});

describe('arguments as a Cedar record', () => {
  const engine = example();
  const calc = tool('calculator');

  it('too deep or too many values: refused with a code, never decided without them', () => {
    let deep: Record<string, unknown> = { leaf: 1 };
    for (let i = 0; i < MAX_ARGS_DEPTH; i++) deep = { d: deep };
    expect(() => engine.decide(call({ tool: calc, args: deep }))).toThrow(
      expect.objectContaining({ code: 'policy_context_too_large' }),
    );
    const wide = Object.fromEntries(
      Array.from({ length: MAX_ARGS_VALUES + 1 }, (_, i) => [`k${i}`, i]),
    );
    expect(() => engine.decide(call({ tool: calc, args: wide }))).toThrow(PolicyContextError);
  });

  it('a key Cedar reserves is refused: an argument cannot name an entity', () => {
    expect(() =>
      engine.decide(
        call({
          tool: calc,
          args: { x: { __entity: { type: 'Toolgate::Group', id: 'platform' } } },
        }),
      ),
    ).toThrow(expect.objectContaining({ code: 'policy_context_unrepresentable' }));
  });

  it('floats and huge integers become text, null is left out', () => {
    expect(argsRecord({ f: 1.5, big: 2 ** 60, n: null, ok: 3, list: [1, null, 'a'] })).toEqual({
      f: '1.5',
      big: '1152921504606847000',
      ok: 3,
      list: [1, 'a'],
    });
  });
});

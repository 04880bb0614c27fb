/** `toolgate policy check|test` as a user runs them: the real bin, the real Cedar engine. */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../../bin/toolgate.mjs', import.meta.url));
const EXAMPLE = fileURLToPath(new URL('../../../../examples/cedar/', import.meta.url));

let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(path.join(tmpdir(), 'tg-policy-'));
});
afterAll(() => {
  rmSync(cwd, { recursive: true, force: true });
});

function toolgate(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd, env: { ...process.env, INIT_CWD: cwd, NO_COLOR: '1' }, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? (err as { code?: unknown }).code : 0;
        resolve({ code: typeof code === 'number' ? code : -1, stdout, stderr });
      },
    );
  });
}

describe('toolgate policy check', () => {
  it('the example folder is valid: its count and hash, exit 0', async () => {
    const run = await toolgate('policy', 'check', path.join(EXAMPLE, 'policies'));
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(/10 policies \(7 permit, 3 forbid\), hash [0-9a-f]{16}\n/);
    expect(run.stdout).toContain(`schema: ${path.join(EXAMPLE, 'toolgate.cedarschema')}`);
  });

  it('a broken folder: every problem with its file, line and policy, exit 1', async () => {
    const dir = path.join(cwd, 'broken');
    cpSync(path.join(EXAMPLE, 'policies'), dir, { recursive: true });
    writeFileSync(path.join(dir, 'notes.cedar'), 'allow everyone\nto do anything\n');
    writeFileSync(
      path.join(dir, 'typo.cedar'),
      '@id("typo")\npermit (principal, action == Toolgate::Action::"call", resource)\nwhen { context.args.hostname == "x" };\n',
    );
    const run = await toolgate(
      'policy',
      'check',
      dir,
      '--schema',
      path.join(EXAMPLE, 'toolgate.cedarschema'),
    );
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/✗ .*broken: 2 problems\n/);
    expect(run.stderr).toMatch(/^ {2}notes\.cedar:1: /m);
    expect(run.stderr).toMatch(/^ {2}typo\.cedar \(typo\): .*hostname/m);
  });
});

describe('toolgate policy test', () => {
  it("examples/cedar/cases.yaml: every case passes with the example's rules", async () => {
    const run = await toolgate('policy', 'test', path.join(EXAMPLE, 'cases.yaml'));
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(/^ok +no run_shell from code mode +deny by no-shell-in-code-mode$/m);
    expect(run.stdout).not.toContain('FAIL');
    // Each of the example's rules decides at least one case.
    const ids = [
      'base-call',
      'destructive-approval',
      'approve',
      'run-python',
      'run-python-over-80',
      'no-shell-in-code-mode',
      'file-delete-scratch',
      'file-delete-approval',
      'github-issues-own-team',
      'support-http-corp-only',
    ];
    for (const id of ids) expect(run.stdout, id).toMatch(new RegExp(`by ${id}$`, 'm'));
    expect(run.stdout).toMatch(/\n20 cases, all passed \(set [0-9a-f]{16}, 10 policies\)\n$/);
  });

  it('a failing case is named with what it got and the deciding policy, exit 1', async () => {
    const file = path.join(cwd, 'failing.yaml');
    writeFileSync(
      file,
      [
        `policies: ${path.join(EXAMPLE, 'policies')}`,
        'cases:',
        '  - name: calculator is fine',
        '    principal: { client: assistant-a }',
        '    tool: { name: calculator }',
        '    expect: allow',
        '  - name: support fetches anything',
        '    principal: { client: support-assistant }',
        '    tool: { name: http_get }',
        '    args: { url: "https://evil.example/" }',
        '    expect: allow',
        '  - name: shell in code mode by the wrong rule',
        '    principal: { client: a }',
        '    tool: { name: run_shell }',
        '    context: { codeMode: true }',
        '    expect: deny',
        '    policies: [base-call]',
      ].join('\n'),
    );
    const run = await toolgate('policy', 'test', file);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/^ok +calculator is fine +allow by base-call$/m);
    expect(run.stdout).toMatch(
      /^FAIL +support fetches anything +expected allow, got deny by support-http-corp-only — the support assistant may fetch only/m,
    );
    expect(run.stdout).toMatch(
      /^FAIL +shell in code mode by the wrong rule +expected deny by base-call, got deny by no-shell-in-code-mode$/m,
    );
    expect(run.stdout).toContain('3 cases, 2 failed');
  });

  it('a malformed case file: exit 2 naming the case and the field', async () => {
    const file = path.join(cwd, 'bad.yaml');
    const write = (text: string) => writeFileSync(file, text);
    write(
      `policies: ${path.join(EXAMPLE, 'policies')}\ncases:\n  - { name: one, principal: { client: a }, tool: { name: t }, expect: allow }\n  - { name: two, principal: { client: a }, tool: { nme: t }, expect: allow }\n`,
    );
    const typo = await toolgate('policy', 'test', file);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('case 2 (two): tool.nme: unknown field');
    expect(typo.stdout).toBe('');
  });
});

describe('toolgate doctor: the policy line', () => {
  it('names the problems of a broken set and how to list them all', async () => {
    const dir = path.join(cwd, 'doctor');
    cpSync(path.join(EXAMPLE, 'policies'), dir, { recursive: true });
    writeFileSync(path.join(dir, 'zz.cedar'), 'forbid (principal, action, resource) when {');
    const config = path.join(cwd, 'doctor.json');
    writeFileSync(
      config,
      JSON.stringify({
        // Nothing listens on port 1: the Redis line fails fast; the policy line is what counts.
        redis: { url: 'redis://127.0.0.1:1' },
        worker: { queues: ['fast'] },
        policy: {
          cedar: { policies: 'doctor', schema: path.join(EXAMPLE, 'toolgate.cedarschema') },
        },
      }),
    );
    const run = await toolgate('doctor', '--json', '--config', config);
    const checks = JSON.parse(run.stdout) as { name: string; status: string; detail: string }[];
    expect(checks.find((c) => c.name === 'policy')).toMatchObject({
      status: 'fail',
      detail: expect.stringMatching(/^1 problem in .*doctor: zz\.cedar: line 1: /),
      fix: expect.stringContaining('toolgate policy check'),
    });
    expect(run.code).toBe(1);
  });
});

/**
 * `toolgate policy check` and `toolgate policy test`: a Cedar policy set checked and decided
 * here with the gateway's own engine (@toolgate/policy), without a gateway or Redis.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { createLogger } from '@toolgate/log';
import {
  PolicyContextError,
  PolicyEngine,
  PolicySetError,
  loadPolicySet,
  type PolicyDecision,
  type PolicyProblem,
} from '@toolgate/policy';
import { UsageError, colours, type CliIo, type Command } from '../command.js';
import { CaseFileError, parseCases, type PolicyCase } from '../policy/cases.js';

export const policyCheckCommand: Command = {
  name: 'policy check',
  summary: 'parse and validate a Cedar policy folder or file against its schema',
  help: `usage: toolgate policy check <dir-or-file> [--schema <file>]

  Reads the .cedar files of a folder (name order) or one file, and the schema, the way the
  gateway loads policy.cedar: parse, no templates, unique @id, strict validation against the
  schema. Prints every problem as "<file>[:<line>] [(<policy id>)]: <message>", or a summary:
  the number of policies and the set's hash (the one /readyz and GET /v1/policy show).

  --schema <file>  the .cedarschema (default: the one .cedarschema file in the folder, or in
                   the folder above it)

Exit codes: 0 valid, 1 problems found (or the files cannot be read), 2 bad usage.
`,
  options: { schema: { type: 'string', short: 's' } },
  args: { min: 1, max: 1 },
  async run({ positionals, values }, io) {
    const policies = path.resolve(io.cwd, positionals[0]!);
    const schema = schemaFor(policies, values.schema, io.cwd);
    const c = colours(io);
    try {
      const set = loadPolicySet({ policies, schema });
      const all = [...set.policies.values()];
      const forbids = all.filter((p) => p.effect === 'forbid').length;
      io.out(
        `${c.green('✓')} ${policies}: ${all.length} ${all.length === 1 ? 'policy' : 'policies'} (${all.length - forbids} permit, ${forbids} forbid), hash ${set.hash}\n` +
          `  schema: ${schema}\n`,
      );
      return 0;
    } catch (err) {
      if (!(err instanceof PolicySetError)) throw err;
      printProblems(io, policies, err.problems);
      return 1;
    }
  },
};

export const policyTestCommand: Command = {
  name: 'policy test',
  summary: 'decide a table of requests with the real engine; each must get its expected decision',
  help: `usage: toolgate policy test <cases.yaml> [--policies <dir-or-file>] [--schema <file>]

  Each case is a request and the decision it must get, decided here with the gateway's engine:

    policies: policies              # optional, relative to this file (--policies wins)
    schema: toolgate.cedarschema    # optional, likewise (default as for policy check)
    cases:
      - name: support may not fetch other hosts
        principal: { client: support-assistant, user: ann, groups: [platform] }
        tool: { name: http_get, category: http, upstream: github,
                annotations: { readOnly: true, destructive: false } }
        action: call                # or approve; default call
        args: { url: https://evil.example/ }
        context: { codeMode: true, session: s1, sourceIp: 10.0.0.1, conversationId: c1,
                   now: 2026-01-01T00:00:00Z,
                   budget: { sandboxSeconds: { used: 800, limit: 1000 } } }
        expect: deny                # allow | deny | approval
        policies: [support-http-corp-only]   # optional: exactly these ids decide it

  Only name, principal.client, tool.name and expect are required. A tool's category defaults
  to upstream:<upstream>, else "general"; codeMode: true is a nested call of
  run_code_with_tools. The tool need not exist anywhere: the case describes it.
  Prints "ok" or "FAIL" per case with the decision and the deciding policies.

Exit codes: 0 every case passes, 1 a case fails (or the policies are invalid), 2 bad usage or a
bad case file (the case and field are named).
`,
  options: {
    policies: { type: 'string', short: 'p' },
    schema: { type: 'string', short: 's' },
  },
  args: { min: 1, max: 1 },
  async run({ positionals, values }, io) {
    const file = path.resolve(io.cwd, positionals[0]!);
    const c = colours(io);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      io.err(`${c.red('✗')} cannot read ${file}: ${(err as Error).message}\n`);
      return 2;
    }
    let cases;
    try {
      cases = parseCases(text);
    } catch (err) {
      if (!(err instanceof CaseFileError)) throw err;
      io.err(`${c.red('✗')} ${file}: ${err.message}\n`);
      return 2;
    }
    const base = path.dirname(file);
    const policies =
      typeof values.policies === 'string'
        ? path.resolve(io.cwd, values.policies)
        : cases.policies !== undefined
          ? path.resolve(base, cases.policies)
          : undefined;
    if (policies === undefined)
      throw new UsageError(
        'toolgate policy test: no policies: give --policies or "policies:" in the case file',
      );
    const schema =
      typeof values.schema === 'string'
        ? path.resolve(io.cwd, values.schema)
        : cases.schema !== undefined
          ? path.resolve(base, cases.schema)
          : schemaFor(policies, undefined, io.cwd);
    let engine: PolicyEngine;
    try {
      engine = new PolicyEngine({
        policies,
        schema,
        logger: createLogger('toolgate', { level: 'silent' }),
      });
    } catch (err) {
      if (!(err instanceof PolicySetError)) throw err;
      printProblems(io, policies, err.problems);
      return 1;
    }
    const width = Math.max(...cases.cases.map((k) => k.name.length));
    let failed = 0;
    for (const k of cases.cases) {
      const line = runCase(engine, k);
      if (!line.ok) failed++;
      const mark = line.ok ? c.green('ok  ') : c.red('FAIL');
      io.out(`${mark}  ${k.name.padEnd(width)}  ${line.text}\n`);
    }
    const n = cases.cases.length;
    io.out(
      `\n${n} case${n === 1 ? '' : 's'}, ${failed > 0 ? c.red(`${failed} failed`) : c.green('all passed')} (set ${engine.state().hash}, ${engine.state().policies} policies)\n`,
    );
    return failed > 0 ? 1 : 0;
  },
};

/** One case decided: whether it got what it expects, and the line that says so. */
function runCase(engine: PolicyEngine, k: PolicyCase): { ok: boolean; text: string } {
  let d: PolicyDecision;
  try {
    d = engine.decide(k.request);
  } catch (err) {
    if (!(err instanceof PolicyContextError)) throw err;
    return { ok: false, text: `expected ${k.expect}, got refused: ${err.code} (${err.message})` };
  }
  const by = d.policies.length > 0 ? d.policies.join(', ') : 'no policy';
  const errors = d.errors.length > 0 ? `; failed to evaluate: ${d.errors.join(', ')}` : '';
  const got = `${d.decision} by ${by}${errors}`;
  if (d.decision !== k.expect) {
    const reason = d.reason === undefined ? '' : ` — ${d.reason}`;
    return { ok: false, text: `expected ${k.expect}, got ${got}${reason}` };
  }
  if (k.policies !== undefined && !sameIds(k.policies, d.policies)) {
    return {
      ok: false,
      text: `expected ${k.expect} by ${k.policies.join(', ') || 'no policy'}, got ${got}`,
    };
  }
  return { ok: true, text: got };
}

const sameIds = (a: string[], b: string[]) =>
  a.length === b.length && [...a].sort().every((id, i) => id === [...b].sort()[i]);

/**
 * The schema to validate with: the flag, else the one `.cedarschema` in the policy folder (a
 * file: its folder) or the folder above it. None or several: bad usage (exit 2).
 */
export function schemaFor(policies: string, flag: unknown, cwd: string): string {
  if (typeof flag === 'string') return path.resolve(cwd, flag);
  let dir: string;
  try {
    dir = statSync(policies).isDirectory() ? policies : path.dirname(policies);
  } catch {
    throw new UsageError(`toolgate policy: no such file or folder: ${policies}`);
  }
  for (const d of [dir, path.dirname(dir)]) {
    let found: string[];
    try {
      found = readdirSync(d).filter((f) => f.endsWith('.cedarschema'));
    } catch {
      continue;
    }
    if (found.length === 1) return path.join(d, found[0]!);
    if (found.length > 1)
      throw new UsageError(
        `toolgate policy: several schemas in ${d} (${found.join(', ')}): say which with --schema`,
      );
  }
  throw new UsageError(
    `toolgate policy: no .cedarschema next to ${policies}: say which with --schema`,
  );
}

/** `<file>[:<line>] [(<policy>)]: <message>`, one per problem. */
function printProblems(io: CliIo, policies: string, problems: PolicyProblem[]): void {
  const c = colours(io);
  io.err(
    `${c.red('✗')} ${policies}: ${problems.length} problem${problems.length === 1 ? '' : 's'}\n`,
  );
  for (const p of problems) {
    const m = /^line (\d+): ([\s\S]*)$/.exec(p.message);
    const where = m ? `${p.file}:${m[1]}` : p.file;
    io.err(
      `  ${c.bold(where)}${p.policy ? ` (${p.policy})` : ''}: ${(m ? m[2]! : p.message).replace(/\n/g, ' ')}\n`,
    );
  }
}

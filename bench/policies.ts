// Issue 30's numbers: calculator calls through a gateway deciding with 1,000 Cedar policies
// against one deciding with none, in the same run (docs/policy.md, cost). Prints the throughput
// ratio, the p50 added and what one evaluation costs.
//
// Two gateways (one with `policy.cedar`, one without) share one worker and one Redis, and are
// measured in alternating rounds, so a slow stretch of the machine weighs on both alike. The
// set is examples/cedar plus generated policies (the mix is below and in docs/policy.md).
//
//   pnpm bench:policies                  # 1,000 generated policies
//   pnpm bench:policies --policies 5000  # or BENCH_POLICIES=5000
import { cpSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { createLogger } from '@toolgate/log';
import { PolicyEngine } from '@toolgate/policy';
import { ROOT, benchRedis, cpuMs, freePort, percentile, startTs, stop } from './lib.js';

const { values: flags } = parseArgs({
  options: { policies: { type: 'string' } },
  allowPositionals: true,
});
const count = Number(flags.policies ?? process.env.BENCH_POLICIES ?? 1000);
if (!Number.isInteger(count) || count < 0) throw new Error('--policies takes a whole number');
const seconds = Number(process.env.BENCH_SECONDS ?? 4);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 64);
const sequential = Number(process.env.BENCH_SEQUENTIAL ?? 1500);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const decisions = Number(process.env.BENCH_DECISIONS ?? 5000);
const EXPRESSION = '2*(3+4)';
/** Issue 30: with the policies, ≥ 0.9× the throughput and ≤ 0.2 ms more at p50. */
const TARGET = { throughput: 0.9, p50AddedMs: 0.2 } as const;

/** Tools the generated rules name: a deployment's catalogue, the calculator among them. */
const TOOLS = 200;
/** One rule in 50 names the calculator: a popular tool has rules of its own. */
const CALCULATOR_EVERY = 50;
/** One policy in 10 names no tool in its scope: every call tries those. */
const NO_TOOL_EVERY = 10;

/**
 * `n` policies of the shapes deployments write, none of which refuses the bench's call (client
 * `bench` by API key, no user or groups, from 127.0.0.1): 90 % name one tool in their scope
 * (a group's forbid, an argument rule, a client's approval), 10 % name none (a group's
 * category, a source network, a client's destructive calls, a conversation pattern).
 */
function generated(n: number): string {
  const call = 'action == Toolgate::Action::"call"';
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `@id("gen-${i}")`;
    if (i % NO_TOOL_EVERY === NO_TOOL_EVERY - 1) {
      const shapes = [
        `forbid (principal in Toolgate::Group::"g${i}", ${call}, resource in Toolgate::Category::"cat${i % 20}");`,
        `forbid (principal, ${call}, resource) when { context.sourceIp.isInRange(ip("10.${i % 256}.0.0/16")) };`,
        `forbid (principal == Toolgate::Client::"team-${i}", ${call}, resource) when { context.annotations.destructive };`,
        `forbid (principal, ${call}, resource) when { context.conversationId like "blocked-${i}-*" };`,
      ];
      out.push(`${id}\n${shapes[Math.floor(i / NO_TOOL_EVERY) % shapes.length]}`);
      continue;
    }
    const tool = i % CALCULATOR_EVERY === 0 ? 'calculator' : `tool${i % TOOLS}`;
    const resource = `resource == Toolgate::Tool::"${tool}"`;
    const shapes = [
      `forbid (principal in Toolgate::Group::"g${i}", ${call}, ${resource});`,
      `forbid (principal, ${call}, ${resource}) when { context.args has url && context.args.url like "*://blocked-${i}.example/*" };`,
      `@approval("required")\npermit (principal == Toolgate::Client::"team-${i}", ${call}, ${resource}) when { context.annotations.destructive };`,
    ];
    out.push(`${id}\n${shapes[i % shapes.length]}`);
  }
  return out.join('\n\n') + '\n';
}

const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-policies-'));
const policies = join(dir, 'policies');
mkdirSync(policies);
cpSync(join(ROOT, 'examples/cedar/policies'), policies, { recursive: true });
cpSync(join(ROOT, 'examples/cedar/toolgate.cedarschema'), join(dir, 'toolgate.cedarschema'));
writeFileSync(join(policies, 'zz-generated.cedar'), generated(count));

// The evaluation alone, in process: the same set, the bench's call, one decision at a time.
const engine = new PolicyEngine({
  policies,
  schema: join(dir, 'toolgate.cedarschema'),
  logger: createLogger('bench', { level: 'silent' }),
});
const request = {
  action: 'call' as const,
  principal: { client: 'bench' },
  tool: { name: 'calculator', category: 'math', readOnly: true, destructive: false },
  args: { expression: EXPRESSION },
  sourceIp: '127.0.0.1',
};
for (let i = 0; i < 500; i++) engine.decide(request);
const decideMs: number[] = [];
for (let i = 0; i < decisions; i++) {
  const t = performance.now();
  const d = engine.decide(request);
  decideMs.push(performance.now() - t);
  if (d.decision !== 'allow') throw new Error(`the set refuses the bench's call: ${d.reason}`);
}
decideMs.sort((a, b) => a - b);
const policyCount = engine.state().policies;

const redisUrl = await benchRedis();
console.log(
  `toolgate policy benchmark — ${policyCount} policies (examples/cedar + ${count} generated) vs none; Redis ${redisUrl}; ${rounds} rounds of ${seconds} s at concurrency ${concurrency} and ${Math.round(sequential / rounds)} sequential calls per side`,
);

const key = 'bench-key-0123456789abcdef';
// Both gateways share the client's in-flight count: calls a side's run left running when its
// load generator stopped count against the next side's first calls (limits.queued, 64 by default).
const clients = `clients:\n  - id: bench\n    key: ${key}\n    rateLimit: { perMinute: 100000000 }\n    limits: { queued: ${4 * concurrency} }\nlog: { level: warn }\n`;
const plainConfig = join(dir, 'plain.yaml');
writeFileSync(plainConfig, clients);
const cedarConfig = join(dir, 'cedar.yaml');
writeFileSync(
  cedarConfig,
  `${clients}policy:\n  cedar:\n    policies: ./policies\n    schema: ./toolgate.cedarschema\n`,
);
const env = {
  REDIS_URL: redisUrl,
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: '0',
  // Two gateways on one host: each its own metrics port.
  GATEWAY_METRICS_PORT: '0',
  TOOLGATE_REDIS_PREFIX: 'bench-policies',
  TOOLGATE_LOG_LEVEL: 'info',
  // The in-process path only (the sandbox path has its own benchmark).
  TOOLGATE_WORKER_QUEUES: 'fast',
};
const worker = await startTs(
  'services/worker/src/main.ts',
  { ...env, TOOLGATE_CONFIG: plainConfig },
  /worker started/,
);

interface Side {
  label: string;
  pid: number | undefined;
  port: number;
}
const started: Awaited<ReturnType<typeof startTs>>[] = [];
async function gatewayWith(label: string, config: string): Promise<Side> {
  const port = await freePort();
  const child = await startTs(
    'services/gateway/src/main.ts',
    { ...env, TOOLGATE_CONFIG: config, PORT: String(port) },
    /gateway listening/,
  );
  started.push(child);
  return { label, pid: child.pid, port };
}
const none = await gatewayWith('no policies', plainConfig);
const cedar = await gatewayWith(`${policyCount} policies`, cedarConfig);

async function http(
  side: Side,
  options: Partial<autocannon.Options>,
  onLatency?: (ms: number) => void,
) {
  const run = autocannon({
    url: `http://127.0.0.1:${side.port}/tools/calculator/execute`,
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ expression: EXPRESSION }),
    // Every response is checked: a refusal or a wrong answer fails the run.
    verifyBody: (body: string) => body.includes('"status":"ok"') && body.includes('"result":14'),
    ...options,
  });
  if (onLatency) {
    run.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) =>
      onLatency(ms),
    );
  }
  const result = await run;
  const failed = result.errors + result.timeouts + result.non2xx + result.mismatches;
  if (failed > 0) {
    throw new Error(
      `${side.label}: ${failed} failed calls (errors ${result.errors}, timeouts ${result.timeouts}, non-2xx ${result.non2xx}, wrong answers ${result.mismatches})`,
    );
  }
  return result.requests.total;
}

const sides = [none, cedar];
for (const side of sides) await http(side, { connections: concurrency, duration: warmUpSeconds });
const totals = new Map(sides.map((s) => [s, { calls: 0, times: [] as number[], cpuMs: 0 }]));
for (let round = 1; round <= rounds; round++) {
  const line: string[] = [];
  for (const side of sides) {
    const total = totals.get(side)!;
    const times: number[] = [];
    await http(side, { connections: 1, amount: Math.ceil(sequential / rounds) }, (ms) =>
      times.push(ms),
    );
    total.times.push(...times);
    const before = cpuMs(side.pid) ?? 0;
    const calls = await http(side, { connections: concurrency, duration: seconds });
    total.cpuMs += (cpuMs(side.pid) ?? 0) - before;
    total.calls += calls;
    times.sort((a, b) => a - b);
    line.push(
      `${side.label}: ${(calls / seconds).toFixed(0)} calls/s, p50 ${percentile(times, 50).toFixed(2)} ms`,
    );
  }
  console.log(`  round ${round}/${rounds}  ${line.join('  |  ')}`);
}

for (const child of started) await stop(child);
await stop(worker);

console.log('');
const summary = new Map(
  sides.map((side) => {
    const { calls, times, cpuMs: cpu } = totals.get(side)!;
    times.sort((a, b) => a - b);
    const s = {
      throughput: calls / (seconds * rounds),
      p50: percentile(times, 50),
      p99: percentile(times, 99),
      gatewayCpuUs: (cpu * 1000) / calls,
    };
    console.log(
      `  ${side.label.padEnd(16)} p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  ${s.throughput.toFixed(0)} calls/s @${concurrency}  gateway CPU ${s.gatewayCpuUs.toFixed(0)} µs/call`,
    );
    return [side, s] as const;
  }),
);
const [n, c] = [summary.get(none)!, summary.get(cedar)!];
const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
const ratio = c.throughput / n.throughput;
const added = c.p50 - n.p50;
console.log('');
console.log(
  `throughput ratio (policies / none): ${ratio.toFixed(2)}   target ≥ ${TARGET.throughput}  ${verdict(ratio >= TARGET.throughput)}`,
);
console.log(
  `p50 added        (policies − none): ${added.toFixed(3)} ms   target ≤ ${TARGET.p50AddedMs} ms  ${verdict(added <= TARGET.p50AddedMs)}`,
);
console.log(
  `gateway CPU added per call: ${(c.gatewayCpuUs - n.gatewayCpuUs).toFixed(0)} µs (the decision, its metrics and the record's verdict)`,
);
console.log(
  `evaluation per call, in process (${decisions} decisions of the calculator call): p50 ${(percentile(decideMs, 50) * 1000).toFixed(0)} µs, p99 ${(percentile(decideMs, 99) * 1000).toFixed(0)} µs, mean ${((decideMs.reduce((a, b) => a + b, 0) / decideMs.length) * 1000).toFixed(0)} µs`,
);
process.exit(0);

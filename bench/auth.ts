// Issue 22 §5: what checking an OAuth access token costs per request. Calculator calls/s at
// concurrency 64 through the real gateway and worker, with a JWT access token (RS256, its JWKS
// cached after the first request) against the same calls with an API key, in alternating
// rounds of one run. Prints the ratio (target ≥ 0.9).
//
// The authorization server is a few lines of node:http here (its metadata and JWKS): only the
// gateway's side of the exchange is measured, and it never calls the server once it has the keys.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { benchRedis, cpuMs, freePort, startTs, stop } from './lib.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 4);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 64);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const TARGET = 0.9;

const redisUrl = await benchRedis();
let issuer = '';

const { privateKey, publicKey } = await generateKeyPair('RS256');
const jwk = { ...(await exportJWK(publicKey)), kid: 'bench-1', alg: 'RS256', use: 'sig' };
let jwksFetches = 0;
const authServer = createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  if (req.url === '/.well-known/oauth-authorization-server') {
    res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
  } else if (req.url === '/jwks') {
    jwksFetches++;
    res.end(JSON.stringify({ keys: [jwk] }));
  } else res.writeHead(404).end('{}');
});
// Bound first, on a port of its own choosing: a port picked ahead can be taken meanwhile.
await new Promise<void>((r) => authServer.listen(0, '127.0.0.1', r));
issuer = `http://127.0.0.1:${(authServer.address() as { port: number }).port}`;
const port = await freePort();
const audience = `http://127.0.0.1:${port}/mcp`;
// A client's token (no user claim), as client credentials give: what is measured is checking
// the token, not the per-user admission, stats and fair turns a user's call adds (docs/auth.md).
const token = await new SignJWT({ client_id: 'bench', scope: 'tools:math' })
  .setProtectedHeader({ alg: 'RS256', kid: 'bench-1', typ: 'at+jwt' })
  .setIssuer(issuer)
  .setAudience(audience)
  .setIssuedAt()
  .setExpirationTime('2h')
  .sign(privateKey);

const key = 'bench-key-0123456789abcdef';
const config = join(mkdtempSync(join(tmpdir(), 'toolgate-bench-auth-')), 'toolgate.yaml');
writeFileSync(
  config,
  [
    'clients:',
    '  - id: bench',
    `    key: ${key}`,
    '    rateLimit: { perMinute: 100000000 }',
    // Admission is not what is measured: a slow worker must not turn calls into 429s.
    '    limits: { queued: 100000 }',
    'auth:',
    '  oauth:',
    `    issuer: ${issuer}`,
    `    audience: ${audience}`,
    "    scopes: { 'tools:math': ['category:math'] }",
    'log: { level: warn }',
    '',
  ].join('\n'),
);
const env = {
  REDIS_URL: redisUrl,
  TOOLGATE_CONFIG: config,
  PORT: String(port),
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: '0',
  GATEWAY_METRICS_PORT: '0', // off: a fixed port may be another run's
  TOOLGATE_REDIS_PREFIX: 'benchauth',
  TOOLGATE_LOG_LEVEL: 'info',
  TOOLGATE_WORKER_QUEUES: 'fast',
};
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);

async function load(bearer: string, duration: number): Promise<number> {
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/tools/calculator/execute`,
    method: 'POST',
    headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
    body: JSON.stringify({ expression: '2*(3+4)' }),
    verifyBody: (body: string) => body.includes('"result":14'),
    connections: concurrency,
    duration,
  });
  const failed = result.errors + result.timeouts + result.non2xx + result.mismatches;
  if (failed > 0) {
    throw new Error(
      `${failed} failed calls (errors ${result.errors}, timeouts ${result.timeouts}, non-2xx ${result.non2xx}, wrong answers ${result.mismatches})`,
    );
  }
  return result.requests.total;
}

console.log(
  `toolgate auth benchmark — calculator at concurrency ${concurrency}, ${rounds} alternating rounds of ${seconds} s`,
);
const sides = [
  { label: 'API key', bearer: key, calls: 0, gatewayCpuMs: 0 },
  { label: 'JWT (RS256, cached JWKS)', bearer: token, calls: 0, gatewayCpuMs: 0 },
];
for (const side of sides) {
  // One call first: a wrong setup says what is wrong, not just that calls failed.
  const res = await fetch(`http://127.0.0.1:${port}/tools/calculator/execute`, {
    method: 'POST',
    headers: { authorization: `Bearer ${side.bearer}`, 'content-type': 'application/json' },
    body: JSON.stringify({ expression: '2*(3+4)' }),
  });
  if (res.status !== 200) throw new Error(`${side.label}: HTTP ${res.status} ${await res.text()}`);
  await load(side.bearer, warmUpSeconds);
}
/** Each round's JWT/API-key ratio: on a shared machine their median moves less than the totals. */
const roundRatios: number[] = [];
for (let round = 1; round <= rounds; round++) {
  const line: string[] = [];
  const perSide = new Map<string, number>();
  // Alternate which side goes first, so a slow stretch of the machine weighs on both alike.
  for (const side of round % 2 ? sides : [...sides].reverse()) {
    const before = cpuMs(gateway.pid) ?? 0;
    const calls = await load(side.bearer, seconds);
    // The gateway's CPU per call: what a token adds, less shaken by the machine's other load.
    side.gatewayCpuMs += (cpuMs(gateway.pid) ?? 0) - before;
    side.calls += calls;
    perSide.set(side.label, calls);
    line.push(`${side.label}: ${(calls / seconds).toFixed(0)} calls/s`);
  }
  roundRatios.push(perSide.get(sides[1]!.label)! / perSide.get(sides[0]!.label)!);
  console.log(`  round ${round}/${rounds}  ${line.join('  |  ')}`);
}
await stop(gateway);
await stop(worker);
authServer.close();

const [apiKey, jwt] = sides.map((s) => s.calls / (seconds * rounds)) as [number, number];
const ratio = jwt / apiKey;
console.log('');
console.log(`  API key                   ${apiKey.toFixed(0)} calls/s @${concurrency}`);
console.log(`  JWT (RS256, cached JWKS)  ${jwt.toFixed(0)} calls/s @${concurrency}`);
const cpu = sides.map((s) => (s.gatewayCpuMs * 1000) / s.calls);
console.log(
  `  gateway CPU per call: API key ${cpu[0]!.toFixed(0)} µs, JWT ${cpu[1]!.toFixed(0)} µs`,
);
console.log(`  JWKS fetched ${jwksFetches} time(s) over the run`);
const median = [...roundRatios].sort((a, b) => a - b)[Math.floor(roundRatios.length / 2)]!;
console.log(
  `token/API key throughput ratio: ${ratio.toFixed(2)} (median of rounds ${median.toFixed(2)})   target ≥ ${TARGET}  ${ratio >= TARGET ? 'PASS' : 'FAIL'}`,
);
process.exit(0);

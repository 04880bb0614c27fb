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
import { benchRedis, freePort, startTs, stop } from './lib.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 4);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 64);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const TARGET = 0.9;

const redisUrl = await benchRedis();
const [asPort, port] = [await freePort(), await freePort()];
const issuer = `http://127.0.0.1:${asPort}`;
const audience = `http://127.0.0.1:${port}/mcp`;

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
await new Promise<void>((r) => authServer.listen(asPort, '127.0.0.1', r));
const token = await new SignJWT({ client_id: 'bench', scope: 'tools:math', sub: 'bench-user' })
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
  if (failed > 0) throw new Error(`${failed} failed calls (non-2xx ${result.non2xx})`);
  return result.requests.total;
}

console.log(
  `toolgate auth benchmark — calculator at concurrency ${concurrency}, ${rounds} alternating rounds of ${seconds} s`,
);
const sides = [
  { label: 'API key', bearer: key, calls: 0 },
  { label: 'JWT (RS256, cached JWKS)', bearer: token, calls: 0 },
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
for (let round = 1; round <= rounds; round++) {
  const line: string[] = [];
  // Alternate which side goes first, so a slow stretch of the machine weighs on both alike.
  for (const side of round % 2 ? sides : [...sides].reverse()) {
    const calls = await load(side.bearer, seconds);
    side.calls += calls;
    line.push(`${side.label}: ${(calls / seconds).toFixed(0)} calls/s`);
  }
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
console.log(`  JWKS fetched ${jwksFetches} time(s) over the run`);
console.log(
  `token/API key throughput ratio: ${ratio.toFixed(2)}   target ≥ ${TARGET}  ${ratio >= TARGET ? 'PASS' : 'FAIL'}`,
);
process.exit(0);

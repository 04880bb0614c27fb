// The egress proxy's cost of credential injection (docs/credentials.md): p50 of one HTTPS GET
// through the proxy to a host WITH a rule (TLS terminated by the proxy's CA, header added,
// forwarded over a verified TLS connection) against the same GET to a host without one (an
// opaque CONNECT tunnel), in one run, interleaved. Each call opens a fresh connection to the
// proxy, as a sandbox's curl does. Loopback only: an HTTPS server with its own CA stands in for
// the API, and the proxy resolves both test names to it.
//
// Target: p50 ratio (injected / tunnel) ≤ 1.5.
// Env (defaults): BENCH_CALLS (400) calls per side, BENCH_ROUNDS (4) interleaved rounds.
import { createServer } from 'node:https';
import type { CallCredentials } from '@toolgate/registry';
import { EgressCa, startEgressProxy } from '@toolgate/tools';
import { ProxyAgent, request } from 'undici';

const calls = Number(process.env.BENCH_CALLS ?? 400);
const rounds = Number(process.env.BENCH_ROUNDS ?? 4);

const upstreamCa = new EgressCa('bench upstream CA');
const server = createServer(
  { SNICallback: (name, cb) => cb(null, upstreamCa.contextFor(name)) },
  (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(`{"ok":true,"auth":${req.headers.authorization ? 'true' : 'false'}}`);
  },
);
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as { port: number }).port;

const credentials: CallCredentials = {
  covers: ({ host }) => host === 'api.test',
  headersFor: () => Promise.resolve([['authorization', 'Bearer bench-secret-value']]),
};
const proxy = await startEgressProxy({
  host: '127.0.0.1',
  policy: { allowPrivateNetworks: false, allowHosts: ['api.test', 'plain.test'] },
  lookup: () => Promise.resolve([{ address: '127.0.0.1', family: 4 }]),
  credentialsOf: () => credentials,
  upstreamCa: [upstreamCa.certPem],
});
// What a sandbox trusts (public roots + the proxy's CA) plus, for the tunnel, the upstream's
// own CA: the tunnelled session is the real host's.
const trust = `${proxy.caBundle}${upstreamCa.certPem}`;

/** One GET on a fresh connection through the proxy; milliseconds. */
async function once(host: string): Promise<number> {
  const agent = new ProxyAgent({ uri: proxy.url, requestTls: { ca: trust } });
  const t0 = performance.now();
  try {
    const res = await request(`https://${host}:${port}/v1/thing`, { dispatcher: agent });
    const body = await res.body.text();
    if (res.statusCode !== 200 || body.includes('"auth":true') !== (host === 'api.test'))
      throw new Error(`unexpected answer from ${host}: ${res.statusCode} ${body}`);
    return performance.now() - t0;
  } finally {
    await agent.close();
  }
}

const p = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

// Warm-up: the first certificate for api.test is signed here, not in the measurement.
for (let i = 0; i < 20; i++) {
  await once('api.test');
  await once('plain.test');
}
const injected: number[] = [];
const tunnel: number[] = [];
const perRound = Math.ceil(calls / rounds);
for (let r = 1; r <= rounds; r++) {
  for (let i = 0; i < perRound; i++) {
    // Alternating, so both sides see the same machine load.
    injected.push(await once('api.test'));
    tunnel.push(await once('plain.test'));
  }
  console.log(
    `  round ${r}/${rounds}  injected p50 ${p(injected, 0.5).toFixed(2)} ms  |  tunnel p50 ${p(tunnel, 0.5).toFixed(2)} ms`,
  );
}
await proxy.close();
server.close();

const ratio = p(injected, 0.5) / p(tunnel, 0.5);
console.log('');
console.log(
  `HTTPS through the egress proxy, fresh connection per call, ${injected.length} calls per side`,
);
console.log(
  `  injected (TLS terminated, header added): p50 ${p(injected, 0.5).toFixed(2)} ms  p99 ${p(injected, 0.99).toFixed(2)} ms`,
);
console.log(
  `  plain tunnel (CONNECT, no rule):         p50 ${p(tunnel, 0.5).toFixed(2)} ms  p99 ${p(tunnel, 0.99).toFixed(2)} ms`,
);
console.log(
  `p50 ratio (injected / tunnel): ${ratio.toFixed(2)}   target ≤ 1.5  ${ratio <= 1.5 ? 'PASS' : 'FAIL'}`,
);
process.exit(ratio <= 1.5 ? 0 : 1);

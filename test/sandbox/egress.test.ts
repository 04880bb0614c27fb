/**
 * Network-enabled sandboxes (sandbox.allowNetwork, manifest tools with `network: true`): they
 * reach what the http tools' SSRF guard allows, through the egress proxy, and nothing else —
 * not the host's services, not private or metadata addresses, not around the proxy.
 */
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { manifestTool, parseManifest } from '@toolgate/manifest-tools';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { startEgressProxy } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`egress: skipped, ${reason}`);

async function serve(host: string, body: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => res.end(body));
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as { port: number }).port };
}

describe.skipIf(reason !== undefined)('network-enabled sandboxes (docker)', () => {
  let dir: string;
  let sandbox: Sandbox;
  let unfiltered: Sandbox;
  let secret: { server: Server; port: number };
  let allowed: { server: Server; port: number };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'toolgate-egress-'));
    // A host service on every interface (as Redis or the Docker API might be), and one the
    // operator opened to tools with policy.http.allowHosts.
    secret = await serve('0.0.0.0', 'host secret');
    allowed = await serve('127.0.0.1', 'allowed service');
    sandbox = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'a'), { allowNetwork: true, pool: { size: 0 } }),
      {
        startEgressProxy: (host, identify) =>
          startEgressProxy({
            host,
            identify,
            policy: { allowPrivateNetworks: false, allowHosts: [`127.0.0.1:${allowed.port}`] },
          }),
      },
    );
    await sandbox.start();
    unfiltered = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'b'), { allowNetwork: true, pool: { size: 0 } }),
    );
  }, 60_000);

  afterAll(async () => {
    await sandbox?.close();
    await unfiltered?.close();
    secret?.server.close();
    allowed?.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  const sh = async (script: string) => {
    const r = await sandbox.run({
      image: 'shell',
      argv: ['bash', '-c', script],
      network: true,
      timeoutMs: 20_000,
    });
    return r.stdout + r.stderr;
  };
  // The bridge address the sandbox sees the host at (the proxy's address).
  const gateway = 'P=${HTTPS_PROXY#http://}; GW=${P%:*};';

  it('reaches a destination the SSRF policy allows, through the proxy', async () => {
    expect(await sh(`curl -sS -m 10 http://127.0.0.1:${allowed.port}/`)).toBe('allowed service');
  });

  it('the proxy refuses private, loopback and metadata destinations with the reason', async () => {
    const out = await sh(
      `${gateway} curl -sS -m 10 http://$GW:${secret.port}/; echo; ` +
        `curl -sS -m 10 http://127.0.0.1:${secret.port}/; echo; ` +
        `curl -sS -m 10 http://169.254.169.254/latest/meta-data/; echo; ` +
        `curl -sS -m 10 https://127.0.0.1:${secret.port}/ 2>&1; echo`,
    );
    expect(out).not.toContain('host secret');
    expect(out).toMatch(/toolgate egress: refused: .*private/);
    expect(out).toMatch(/toolgate egress: refused: .*loopback/);
    expect(out).toMatch(/toolgate egress: refused: .*cloudMetadata|metadata/);
    expect(out).toMatch(/CONNECT tunnel failed, response 403/);
  });

  it('nothing goes around the proxy: host services on the bridge and outside addresses are unreachable', async () => {
    const out = await sh(
      `${gateway} for u in http://$GW:${secret.port}/ http://172.17.0.1:${secret.port}/ http://169.254.169.254/ http://1.1.1.1/; do ` +
        `curl -sS -m 3 --noproxy '*' "$u" >/dev/null 2>&1 && echo "REACHED $u" || echo "blocked $u"; done`,
    );
    expect(out).not.toContain('REACHED');
    expect(out.match(/blocked/g)).toHaveLength(4);
  }, 30_000);

  it('without an egress filter, network calls are refused rather than given an open network', async () => {
    await expect(
      unfiltered.run({ image: 'shell', argv: ['true'], network: true }),
    ).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('no egress filter'),
    });
  });

  it('closing the driver removes its network and firewall rules', async () => {
    const { execFileSync } = await import('node:child_process');
    const before = execFileSync('docker', ['network', 'ls', '--format', '{{.Name}}'], {
      encoding: 'utf8',
    });
    expect(before).toMatch(/toolgate-egress-/);
    await sandbox.close();
    const after = execFileSync('docker', ['network', 'ls', '--format', '{{.Name}}'], {
      encoding: 'utf8',
    });
    const rules = execFileSync('iptables', ['-S'], { encoding: 'utf8' });
    const mine = before
      .split('\n')
      .filter((n) => n.startsWith('toolgate-egress-') && !after.includes(n));
    expect(mine.length).toBeGreaterThan(0);
    for (const n of mine) expect(rules).not.toContain(`tge-${n.slice('toolgate-egress-'.length)}`);
  });
});

/**
 * Sandboxes of different clients on one worker: each reaches the proxy, neither reaches the
 * other — directly on any port it listens on (TCP or UDP), nor through the proxy, even with a
 * policy.http that allows private networks. And the proxy's connections are shared per client.
 */
describe.skipIf(reason !== undefined)('network sandboxes of different clients (docker)', () => {
  let dir: string;
  let sandbox: Sandbox;
  let board: { server: Server; port: number; values: Map<string, string> };
  let holder: { server: NetServer; port: number; sockets: Set<Socket> };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'toolgate-egress-tenants-'));
    // A key-value board the sandboxes reach through the proxy to meet each other.
    const values = new Map<string, string>();
    const boardServer = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://board');
      const key = url.searchParams.get('k') ?? '';
      const value = url.searchParams.get('v');
      if (value !== null) values.set(key, value);
      const found = values.get(key);
      res.writeHead(found === undefined ? 404 : 200).end(found ?? '');
    });
    await new Promise<void>((resolve) => boardServer.listen(0, '127.0.0.1', resolve));
    board = { server: boardServer, port: (boardServer.address() as { port: number }).port, values };
    // A TCP service that keeps every connection open until the test lets it go: held tunnels.
    const sockets = new Set<Socket>();
    const holdServer = createNetServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
      s.once('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve) => holdServer.listen(0, '127.0.0.1', resolve));
    holder = {
      server: holdServer,
      port: (holdServer.address() as { port: number }).port,
      sockets,
    };
    sandbox = await createSandbox(
      testSandboxConfig('docker', dir, { allowNetwork: true, pool: { size: 0 } }),
      {
        startEgressProxy: (host, identify) =>
          startEgressProxy({
            host,
            identify,
            // The most permissive policy: only the network itself keeps the sandboxes apart.
            policy: {
              allowPrivateNetworks: true,
              allowHosts: [`127.0.0.1:${board.port}`, `127.0.0.1:${holder.port}`],
            },
            maxConnections: 4,
            maxConnectionsPerClient: 2,
          }),
      },
    );
    await sandbox.start();
  }, 60_000);

  afterAll(async () => {
    await sandbox?.close();
    board?.server.close();
    for (const s of holder?.sockets ?? []) s.destroy();
    holder?.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  const runAs = async (clientId: string, script: string, args: string[], timeoutMs = 60_000) => {
    const r = await sandbox.run({
      image: 'python',
      argv: ['python3', '-c', script, ...args],
      network: true,
      timeoutMs,
      clientId,
    });
    return r;
  };

  it('two clients running at once: both reach the proxy, neither reaches the other on any port or through the proxy', async () => {
    const [a, b] = await Promise.all([
      runAs('alice', PEER_SCRIPT, ['alice', 'bob', `http://127.0.0.1:${board.port}/`]),
      runAs('bob', PEER_SCRIPT, ['bob', 'alice', `http://127.0.0.1:${board.port}/`]),
    ]);
    for (const [who, r] of [
      ['alice', a],
      ['bob', b],
    ] as const) {
      expect(r.exitCode, `${who}: ${r.stdout} ${r.stderr}`).toBe(0);
      const report = JSON.parse(r.stdout) as PeerReport;
      // It reached the proxy: the board has its address, and it read the other's.
      expect(board.values.get(`addr-${who}`)).toBe(report.me);
      expect(report.peer).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      expect(report.peer).not.toBe(report.me);
      // Nothing of the other's listeners answered, directly or through the proxy …
      expect(report.direct).toEqual(PORTS.map((port) => ({ port, reached: false })));
      for (const v of report.viaProxy) expect(v.body).not.toContain('sibling secret');
      for (const v of report.connect) expect(v.status).not.toMatch(/ 200 /);
      // … and nothing of the other's attempts arrived at its own (TCP or UDP).
      expect(report.inbound).toEqual([]);
    }
  }, 120_000);

  it('one client at its share of the proxy cannot take the connections of another', async () => {
    // alice asks for every connection the proxy has (4) and keeps what she gets.
    const alice = runAs('alice', HOLD_SCRIPT, [String(holder.port), '4']);
    await waitFor(() => holder.sockets.size >= 2, 30_000);
    // bob gets his share while alice holds hers.
    const bob = await runAs('bob', HOLD_SCRIPT, [String(holder.port), '2', 'release']);
    for (const s of holder.sockets) s.end('bye\n');
    const aliceResult = await alice;
    const held = (r: { stdout: string }) => JSON.parse(r.stdout) as string[];
    expect(held(aliceResult)).toEqual([
      'HTTP/1.1 200 Connection Established',
      'HTTP/1.1 200 Connection Established',
      'HTTP/1.1 503 Service Unavailable',
      'HTTP/1.1 503 Service Unavailable',
    ]);
    expect(held(bob)).toEqual([
      'HTTP/1.1 200 Connection Established',
      'HTTP/1.1 200 Connection Established',
    ]);
  }, 120_000);
});

const PORTS = [8000, 8080, 9000, 40000];

interface PeerReport {
  me: string;
  peer: string;
  direct: { port: number; reached: boolean }[];
  viaProxy: { port: number; body: string }[];
  connect: { port: number; status: string }[];
  inbound: unknown[];
}

async function waitFor(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * One client's sandbox: listens on TCP PORTS and UDP 9999, posts its address to the board
 * (through the proxy), reads the other's, tries every listener of the other directly and
 * through the proxy, waits until the other is done too, and reports as JSON.
 */
const PEER_SCRIPT = String.raw`
import json, os, socket, sys, threading, time, urllib.parse, urllib.request
me, other, board = sys.argv[1], sys.argv[2], sys.argv[3]
PORTS = ${JSON.stringify(PORTS)}
inbound = []
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', port)); s.listen(16)
    while True:
        c, addr = s.accept(); inbound.append(['tcp', port, addr[0]])
        try: c.sendall(b'HTTP/1.0 200 OK\r\ncontent-length: 14\r\n\r\nsibling secret')
        finally: c.close()
def serve_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 9999))
    while True:
        data, addr = s.recvfrom(100); inbound.append(['udp', 9999, addr[0]])
for p in PORTS: threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Thread(target=serve_udp, daemon=True).start()
proxy = urllib.parse.urlsplit(os.environ['HTTP_PROXY'])
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); probe.connect((proxy.hostname, proxy.port))
my_ip = probe.getsockname()[0]
def board_op(key, value=None):
    q = {'k': key} if value is None else {'k': key, 'v': value}
    try:
        with urllib.request.urlopen(board + '?' + urllib.parse.urlencode(q), timeout=10) as r: return r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 404: return None
        raise
def wait_key(key):
    for _ in range(400):
        v = board_op(key)
        if v is not None: return v
        time.sleep(0.1)
    raise SystemExit('no ' + key)
board_op('addr-' + me, my_ip)
peer = wait_key('addr-' + other)
direct = []
for p in PORTS:
    s = socket.socket(); s.settimeout(2)
    try: s.connect((peer, p)); direct.append({'port': p, 'reached': True})
    except OSError: direct.append({'port': p, 'reached': False})
    finally: s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    try: u.sendto(b'hello', (peer, 9999))
    except OSError: pass
via = []
for p in PORTS:
    try:
        with urllib.request.urlopen('http://%s:%d/' % (peer, p), timeout=5) as r: body = r.read().decode()
    except urllib.error.HTTPError as e: body = e.read().decode()
    except Exception as e: body = 'error: %s' % e
    via.append({'port': p, 'body': body})
connect = []
for p in PORTS:
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(b'CONNECT %s:%d HTTP/1.1\r\nhost: %s:%d\r\n\r\n' % (peer.encode(), p, peer.encode(), p))
    try: line = s.recv(200).decode().split('\r\n')[0]
    except OSError as e: line = 'error: %s' % e
    s.close(); connect.append({'port': p, 'status': line})
board_op('done-' + me, '1')
wait_key('done-' + other)
time.sleep(1)
print(json.dumps({'me': my_ip, 'peer': peer, 'direct': direct, 'viaProxy': via, 'connect': connect, 'inbound': inbound}))
`;

/**
 * Opens N CONNECT tunnels to the holding service through the proxy, one after the other, and
 * keeps the ones that open; reports each answer's status line. With "release" it ends at once,
 * otherwise once the service says bye on its tunnels.
 */
const HOLD_SCRIPT = String.raw`
import json, os, socket, sys, urllib.parse
port, n = int(sys.argv[1]), int(sys.argv[2])
proxy = urllib.parse.urlsplit(os.environ['HTTP_PROXY'])
answers, held = [], []
for _ in range(n):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
    s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n\r\n' % (port, port))
    head = b''
    while b'\r\n\r\n' not in head:
        chunk = s.recv(1)
        if not chunk: break
        head += chunk
    line = head.decode().split('\r\n')[0]
    answers.append(line)
    if ' 200 ' in line: held.append(s)
    else: s.close()
if len(sys.argv) < 4:
    for s in held: s.recv(10)
print(json.dumps(answers))
`;

/**
 * Budgets (docs/budgets.md): what a network-enabled sandbox sends and receives through the
 * proxy is its call's `egressBytes` — a manifest tool with `network: true` called through the
 * gateway and the worker, downloading from a loopback server by plain http and through a
 * CONNECT tunnel — and once the day's bytes are spent, the client's next such call is refused
 * while another client keeps calling.
 */
describe.skipIf(reason !== undefined)('egress bytes charged to the call (docker)', () => {
  /** What the loopback server answers to every request: 100,000 bytes of body. */
  const SIZE = 100_000;
  /** What the tunnelled call uploads. */
  const UPLOAD = 30_000;
  let dir: string;
  let sandbox: Sandbox;
  let stack: Stack;
  let web: { server: Server; port: number };
  let received = 0;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'toolgate-egress-budget-'));
    const server = createServer((req, res) => {
      req.on('data', (b: Buffer) => (received += b.length));
      req.on('end', () => res.end('x'.repeat(SIZE)));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    web = { server, port: (server.address() as { port: number }).port };
    sandbox = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'sb'), { allowNetwork: true, pool: { size: 0 } }),
      {
        startEgressProxy: (host, identify, credentialsOf, meterOf) =>
          startEgressProxy({
            host,
            identify,
            ...(meterOf ? { meterOf } : {}),
            policy: { allowPrivateNetworks: false, allowHosts: [`127.0.0.1:${web.port}`] },
          }),
      },
    );
    await sandbox.start();
    const url = `http://127.0.0.1:${web.port}/big`;
    const tool = manifestTool({
      manifest: parseManifest({
        name: 'fetch_big',
        description: 'downloads from the test server through the egress proxy',
        parameters: { type: 'object', properties: { mode: { type: 'string' } } },
        image: 'shell',
        command: [
          'bash',
          '-c',
          [
            'set -eu',
            'mode=$(jq -r .mode)',
            // Plain http through the proxy: an absolute URI in the request line.
            `if [ "$mode" = plain ]; then curl -sS -o /dev/null -w '%{size_download}' ${url}; fi`,
            // A CONNECT tunnel (-p), uploading and downloading through it.
            `if [ "$mode" = tunnel ]; then head -c ${UPLOAD} /dev/zero | curl -sS -p --data-binary @- -o /dev/null -w '%{size_upload} %{size_download}' ${url}; fi`,
          ].join('\n'),
        ],
        network: true,
        output: 'text',
        timeoutSeconds: 30,
      }),
      dir,
      files: [],
    });
    stack = await startStack({
      tools: [tool],
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: {
        clients: [
          {
            id: 'alice',
            key: KEYS.alice,
            tools: ['*'],
            limits: { budget: { egressBytes: { day: 200_000 } } },
          },
          { id: 'bob', key: KEYS.bob, tools: ['*'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
      },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    web?.server.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const fetchBig = (mode: string, key: string) =>
    stack.call('/tools/fetch_big/execute', { json: { mode }, key });
  const used = async () => {
    const view = (await (await stack.call('/v1/budget', { key: KEYS.alice })).json()) as {
      budget: { egressBytes: { used: number; limit: number }[] };
    };
    return view.budget.egressBytes[0]!.used;
  };

  it('charges the bytes relayed both ways, by plain http and through a tunnel, then refuses the next call', async () => {
    const plain = await fetchBig('plain', KEYS.alice);
    expect(await plain.json()).toMatchObject({ status: 'ok', result: String(SIZE) });
    // Plain http: the response body, byte for byte (no request body).
    const afterPlain = await used();
    expect(afterPlain).toBeGreaterThanOrEqual(SIZE);
    expect(afterPlain).toBeLessThan(SIZE + 1000);

    // 100,000 of 200,000: still admitted. Through the tunnel every byte counts, both ways: the
    // upload, the download and the HTTP headers inside.
    const tunnel = await fetchBig('tunnel', KEYS.alice);
    expect(await tunnel.json()).toMatchObject({ status: 'ok', result: `${UPLOAD} ${SIZE}` });
    expect(received).toBe(UPLOAD);
    const afterTunnel = await used();
    expect(afterTunnel - afterPlain).toBeGreaterThanOrEqual(UPLOAD + SIZE);
    expect(afterTunnel - afterPlain).toBeLessThan(UPLOAD + SIZE + 2000);

    const refused = await fetchBig('plain', KEYS.alice);
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as {
      error: { code: string; details: { metric: string; used: number; limit: number } };
    };
    expect(body.error.code).toBe('budget_exhausted');
    expect(body.error.details).toMatchObject({
      metric: 'egressBytes',
      used: afterTunnel,
      limit: 200_000,
    });
    // The refused call never ran: nothing more was charged. Bob, without a budget, still calls.
    expect(await used()).toBe(afterTunnel);
    const bobs = await fetchBig('plain', KEYS.bob);
    expect(await bobs.json()).toMatchObject({ status: 'ok', result: String(SIZE) });
  }, 90_000);
});

/**
 * The network of sandboxes that may reach the network (`sandbox.allowNetwork`, manifest tools
 * with `network: true`), docker driver only. Such a sandbox joins an *internal* Docker network:
 * no route out, and the host's bridge address is its only neighbour. On that address the
 * worker's egress proxy listens (packages/tools http/egress-proxy.ts: the SSRF guard of the
 * http tools), and host firewall rules drop everything else arriving on the bridge, so the
 * host's own services (Redis, the Docker API, metadata endpoints) stay out of reach.
 *
 * Sandboxes of different clients share the bridge but not each other: inter-container traffic
 * is off (Docker's `enable_icc=false`: a FORWARD drop between ports of the bridge), and the host
 * opens no connection into the bridge (an OUTPUT drop of new connections), so not even the
 * proxy, asked for a sibling's address under a permissive `policy.http`, can reach one.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import type {
  EgressCredentials,
  EgressMeter,
  EgressProxyHandle,
  SandboxLogger,
  StartEgressProxy,
} from './types.js';

const run = promisify(execFile);
const BRIDGE_NF_CALL_IPTABLES = '/proc/sys/net/bridge/bridge-nf-call-iptables';

export const LABEL_EGRESS = 'toolgate.egress';

export type { StartEgressProxy } from './types.js';

export interface EgressNetworkInfo {
  /** Docker network name, for NetworkMode. */
  name: string;
  /** What sandboxes get as HTTP_PROXY / HTTPS_PROXY. */
  proxyUrl: string;
  /**
   * Host file of the CA bundle sandboxes trust (public roots + the proxy's CA), when the
   * proxy terminates HTTPS for credential rules; mounted read-only at SANDBOX_CA_FILE.
   */
  caFile?: string;
}

/** Where a network-enabled sandbox finds the CA bundle it trusts. */
export const SANDBOX_CA_FILE = '/etc/toolgate/ca-bundle.pem';

/** The variables OpenSSL, curl, Python requests/httpx, pip and Node read a CA bundle from. */
export function caEnv(): string[] {
  return [
    'SSL_CERT_FILE',
    'CURL_CA_BUNDLE',
    'REQUESTS_CA_BUNDLE',
    'PIP_CERT',
    'NODE_EXTRA_CA_CERTS',
  ].map((name) => `${name}=${SANDBOX_CA_FILE}`);
}

/** Bridge interface names are ≤ 15 characters: `tge-` and 10 hex digits of the owner. */
function bridgeName(owner: string): string {
  return `tge-${createHash('sha256').update(owner).digest('hex').slice(0, 10)}`;
}

/** Chains this module adds rules to (and removes them from, by their comment). */
const CHAINS = ['INPUT', 'OUTPUT'] as const;

function ruleSpecs(bridge: string, port: number): string[][] {
  const comment = ['-m', 'comment', '--comment', `toolgate-egress ${bridge}`];
  return [
    // Listed in this order, inserted at the top in reverse: ACCEPT the proxy, DROP the rest.
    ['INPUT', '-i', bridge, '-p', 'tcp', '--dport', String(port), '-j', 'ACCEPT', ...comment],
    ['INPUT', '-i', bridge, '-j', 'DROP', ...comment],
    // The host starts nothing towards a sandbox: replies of the proxy are ESTABLISHED, while a
    // connection the proxy would open to a sibling sandbox's address is NEW and refused (at
    // once: a DROP would hold the proxy's connection, and the client's share, until it times out).
    ['OUTPUT', '-o', bridge, '-m', 'conntrack', '--ctstate', 'NEW', '-j', 'REJECT', ...comment],
  ];
}

export class EgressNetwork {
  private proxy: EgressProxyHandle | undefined;
  private rules: string[][] = [];

  private constructor(
    private readonly docker: Docker,
    readonly info: EgressNetworkInfo,
    private readonly networkId: string,
    private readonly clients: Map<string, string>,
    private readonly credentials: Map<string, EgressCredentials>,
    private readonly meters: Map<string, EgressMeter>,
  ) {}

  /**
   * Creates this worker's internal network, starts the proxy on its gateway and closes the
   * bridge to everything else. Throws (and leaves nothing behind) if any step fails.
   */
  static async create(
    docker: Docker,
    labels: Record<string, string>,
    owner: string,
    startProxy: StartEgressProxy,
    stateDir: string,
  ): Promise<EgressNetwork> {
    const bridge = bridgeName(owner);
    const name = `toolgate-egress-${bridge.slice(4)}`;
    await removeNetwork(docker, name);
    const network = await docker.createNetwork({
      Name: name,
      Driver: 'bridge',
      Internal: true,
      EnableIPv6: false,
      Labels: { ...labels, [LABEL_EGRESS]: bridge },
      Options: {
        'com.docker.network.bridge.name': bridge,
        // Sandboxes on the bridge (of any client) cannot reach each other, on any port.
        'com.docker.network.bridge.enable_icc': 'false',
      },
    });
    const inspected = (await network.inspect()) as {
      IPAM?: { Config?: { Gateway?: string }[] };
    };
    const gateway = inspected.IPAM?.Config?.[0]?.Gateway;
    let egress: EgressNetwork | undefined;
    try {
      if (!gateway) throw new Error(`network ${name} has no gateway address`);
      await assertBridgeFiltered();
      const clients = new Map<string, string>();
      const credentials = new Map<string, EgressCredentials>();
      const meters = new Map<string, EgressMeter>();
      const proxy = await startProxy(
        gateway,
        (address) => clients.get(address),
        (address) => credentials.get(address),
        (address) => meters.get(address),
      );
      // The bundle is public (roots and a CA certificate); the CA's key stays in the proxy.
      let caFile: string | undefined;
      if (proxy.caBundle) {
        caFile = path.join(stateDir, 'egress', `${bridge}-ca-bundle.pem`);
        await mkdir(path.dirname(caFile), { recursive: true });
        await writeFile(caFile, proxy.caBundle, { mode: 0o644 });
      }
      egress = new EgressNetwork(
        docker,
        { name, proxyUrl: proxy.url, ...(caFile ? { caFile } : {}) },
        network.id,
        clients,
        credentials,
        meters,
      );
      egress.proxy = proxy;
      const port = Number(new URL(proxy.url).port);
      for (const spec of ruleSpecs(bridge, port).reverse()) {
        await run('iptables', ['-I', ...spec.slice(0, 1), '1', ...spec.slice(1)]);
        egress.rules.push(spec);
      }
      return egress;
    } catch (err) {
      if (egress) await egress.close();
      else await network.remove().catch(() => undefined);
      throw err;
    }
  }

  /**
   * A container of `clientId` now holds `address` on this network: the proxy counts its
   * connections against that client's share, and the bytes it relays for it into `meter`.
   * Call before its program runs.
   */
  admit(
    address: string,
    clientId: string | undefined,
    credentials?: EgressCredentials | undefined,
    meter?: EgressMeter | undefined,
  ): void {
    this.clients.set(address, clientId ?? '');
    if (credentials) this.credentials.set(address, credentials);
    else this.credentials.delete(address);
    if (meter) this.meters.set(address, meter);
    else this.meters.delete(address);
  }

  /**
   * The container at `address` is done (its run ended) or gone: forget it and close what it
   * still holds open, so nothing more is relayed for it (or counted into its meter). Idempotent.
   */
  release(address: string): void {
    this.clients.delete(address);
    this.credentials.delete(address);
    this.meters.delete(address);
    this.proxy?.disconnect(address);
  }

  async close(): Promise<void> {
    for (const spec of this.rules.splice(0)) await deleteRule(spec);
    await this.proxy?.close().catch(() => undefined);
    if (this.info.caFile) await rm(this.info.caFile, { force: true });
    await this.docker
      .getNetwork(this.networkId)
      .remove()
      .catch(() => undefined);
  }
}

/**
 * Docker's ICC drop is an iptables FORWARD rule, and traffic between two ports of one bridge
 * passes iptables only with br_netfilter on (Docker turns it on for a network with ICC off).
 * Without it sandboxes would reach each other: no network for them then.
 */
async function assertBridgeFiltered(): Promise<void> {
  const value = await readFile(BRIDGE_NF_CALL_IPTABLES, 'utf8').catch(() => undefined);
  if (value?.trim() !== '1')
    throw new Error(
      `bridged traffic bypasses iptables here (${BRIDGE_NF_CALL_IPTABLES} is ${value?.trim() ?? 'missing'}; load br_netfilter), so sandboxes could reach each other`,
    );
}

async function deleteRule(spec: string[]): Promise<void> {
  await run('iptables', ['-D', ...spec]).catch(() => undefined);
}

async function removeNetwork(docker: Docker, name: string): Promise<void> {
  const found = await docker.listNetworks({ filters: { name: [name] } }).catch(() => []);
  for (const n of found) {
    if (n.Name !== name) continue;
    const bridge = n.Labels?.[LABEL_EGRESS];
    if (bridge) {
      // The rules of a dead worker name its bridge; the port is not known, so match by comment.
      await removeRulesOf(bridge);
    }
    await docker
      .getNetwork(n.Id)
      .remove()
      .catch(() => undefined);
  }
}

/** Deletes every rule a worker added for `bridge` (its comment names the bridge). */
async function removeRulesOf(bridge: string): Promise<void> {
  for (const chain of CHAINS) {
    const { stdout } = await run('iptables', ['-S', chain]).catch(() => ({ stdout: '' }));
    for (const line of stdout.split('\n')) {
      if (!line.includes(`toolgate-egress ${bridge}`)) continue;
      const args = line.replace(/^-A /, '').match(/"[^"]*"|\S+/g) ?? [];
      await run('iptables', ['-D', ...args.map((a) => a.replace(/^"|"$/g, ''))]).catch(
        () => undefined,
      );
    }
  }
}

/** The reaper's part: networks (and firewall rules) of workers that are gone. */
export async function reapEgressNetworks(
  docker: Docker,
  deploymentLabel: string,
  isDead: (owner: string) => Promise<boolean>,
  ownerLabel: string,
  log: SandboxLogger,
): Promise<number> {
  const list = await docker
    .listNetworks({ filters: { label: [deploymentLabel, LABEL_EGRESS] } })
    .catch(() => []);
  let removed = 0;
  for (const n of list) {
    const owner = n.Labels?.[ownerLabel];
    if (!owner || !(await isDead(owner))) continue;
    await removeNetwork(docker, n.Name);
    removed++;
  }
  if (removed > 0) log.info({ removed }, 'reaped egress networks of dead workers');
  return removed;
}

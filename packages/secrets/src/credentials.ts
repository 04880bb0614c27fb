/**
 * Credential rules (`credentials:` in the config, top level and per client): for requests to an
 * origin (scheme, host, port; https and 443 unless the rule says otherwise), a header whose
 * value names secrets, `Bearer ${secret:github_token}`. The config loader leaves `${secret:…}`
 * as it is; the worker fills it in at use, per call, from the store — the user's secret where
 * the call has a user and that user set one, else the client's.
 */
import { ToolError, type CallCredentials, type RequestOrigin } from '@toolgate/registry';
import { SecretConfigError } from './errors.js';
import { SECRET_NAME, type SecretStore } from './store.js';

export interface CredentialRule {
  /**
   * A host name (`api.github.com`), every name below one (`*.example.com`), an address, or an
   * origin that also states scheme and port (`https://api.example.com:8443`, `http://10.0.0.5`).
   */
  host: string;
  /** The scheme the rule is for (a bare `host` only); default https. */
  scheme?: 'http' | 'https' | undefined;
  /** The port the rule is for (a bare `host` only); default the scheme's, 443 or 80. */
  port?: number | undefined;
  /** The request header to set (any case). */
  header: string;
  /** Its value: text with `${secret:NAME}` where a secret's value goes. */
  value: string;
}

const PLACEHOLDER = /\$\{secret:([^}]*)\}/g;
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Header values may not hold line breaks or NUL (request splitting). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

interface ParsedRule {
  scheme: 'http' | 'https';
  host: string;
  subdomains: boolean;
  port: number;
  header: string;
  /** Literal text and secret names, alternating: text, name, text, …, text. */
  parts: string[];
}

const DEFAULT_PORT = { http: 80, https: 443 } as const;
/** `scheme://host[:port]` with at most a trailing "/": an origin, nothing more. */
const ORIGIN = /^([a-z][a-z0-9+.-]*):\/\/([^/?#@]*?)(?::(\d{1,5}))?\/?$/;

/**
 * Where a rule applies: its scheme, host and port. A secret meant for an HTTPS API must not go
 * in clear to the same name's port 80 or 8081 (docs/credentials.md), so a bare host means
 * https on 443 and anything else is written out.
 */
function parseOrigin(rule: CredentialRule, path: string): Omit<ParsedRule, 'header' | 'parts'> {
  const raw = rule.host.trim().toLowerCase();
  let scheme: string = rule.scheme ?? 'https';
  let port: number | undefined = rule.port;
  let rawHost = raw;
  if (raw.includes('://')) {
    const m = ORIGIN.exec(raw);
    if (!m) {
      throw new SecretConfigError(
        `${path}/host`,
        `"${rule.host}" is not an origin: write scheme://host[:port] with no user, path or query`,
      );
    }
    for (const field of ['scheme', 'port'] as const) {
      if (rule[field] !== undefined) {
        throw new SecretConfigError(
          `${path}/${field}`,
          `the host "${rule.host}" already states the ${field === 'port' ? 'scheme and port' : 'scheme'}; leave out ${field}`,
        );
      }
    }
    scheme = m[1]!;
    rawHost = m[2]!;
    if (m[3] !== undefined) port = Number(m[3]);
  }
  if (scheme !== 'http' && scheme !== 'https') {
    throw new SecretConfigError(
      raw.includes('://') ? `${path}/host` : `${path}/scheme`,
      `"${scheme}" is not a scheme credentials go to (http or https)`,
    );
  }
  port ??= DEFAULT_PORT[scheme];
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new SecretConfigError(`${path}/port`, `${String(port)} is not a port (1 to 65535)`);
  }
  const subdomains = rawHost.startsWith('*.');
  const host = subdomains ? rawHost.slice(2) : rawHost;
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$|^\[[0-9a-f:.]+\]$/.test(host)) {
    throw new SecretConfigError(
      `${path}/host`,
      `"${rule.host}" is not a host name (or *.name), address or origin (https://name:port)`,
    );
  }
  return { scheme, host, subdomains, port };
}

function parseRule(rule: CredentialRule, path: string): ParsedRule {
  const origin = parseOrigin(rule, path);
  if (!TOKEN.test(rule.header)) {
    throw new SecretConfigError(`${path}/header`, `"${rule.header}" is not a header name`);
  }
  const parts = rule.value.split(PLACEHOLDER);
  for (let i = 1; i < parts.length; i += 2) {
    if (!SECRET_NAME.test(parts[i]!)) {
      throw new SecretConfigError(
        `${path}/value`,
        `"\${secret:${parts[i]}}" does not name a secret (letters, digits, "_", "." or "-", at most 64)`,
      );
    }
  }
  if (parts.length === 1) {
    throw new SecretConfigError(
      `${path}/value`,
      'names no secret: write the value as text with ${secret:NAME} in it',
    );
  }
  return { ...origin, header: rule.header.toLowerCase(), parts };
}

/** Every client's rules, parsed once at start (a bad rule stops the process, naming it). */
export class CredentialRules {
  private readonly shared: ParsedRule[];
  private readonly byClient = new Map<string, ParsedRule[]>();

  constructor(
    shared: readonly CredentialRule[],
    clients: readonly { id: string; credentials?: readonly CredentialRule[] | undefined }[],
  ) {
    this.shared = shared.map((r, i) => parseRule(r, `/credentials/${i}`));
    clients.forEach((client, c) => {
      const own = (client.credentials ?? []).map((r, i) =>
        parseRule(r, `/clients/${c}/credentials/${i}`),
      );
      if (own.length > 0) this.byClient.set(client.id, own);
    });
  }

  get size(): number {
    let n = this.shared.length;
    for (const rules of this.byClient.values()) n += rules.length;
    return n;
  }

  /**
   * The rules for a request of `clientId` to `origin` (its scheme, host and port all theirs),
   * one per header: the client's own rule for a header wins over a shared one.
   */
  match(clientId: string, origin: RequestOrigin): ParsedRule[] {
    const name = normalize(origin.host);
    const out = new Map<string, ParsedRule>();
    for (const rule of [...this.shared, ...(this.byClient.get(clientId) ?? [])]) {
      if (rule.scheme !== origin.scheme || rule.port !== origin.port) continue;
      if (rule.subdomains ? name.endsWith(`.${rule.host}`) : name === rule.host)
        out.set(rule.header, rule);
    }
    return [...out.values()];
  }

  /** A call's view: what `ctx.credentials` is. */
  forCall(store: SecretStore, clientId: string, user?: string): CallSecrets {
    return new CallSecrets(this, store, clientId, user);
  }
}

function normalize(host: string): string {
  const h = host.toLowerCase();
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

/**
 * One call's credentials. Each secret is read once per call, and every value it used is kept
 * (`used`) so the worker can take them out of the call's outcome and events.
 */
export class CallSecrets implements CallCredentials {
  private readonly values = new Map<string, Promise<string | undefined>>();
  /** Every secret value this call put in a header. */
  readonly used = new Set<string>();

  constructor(
    private readonly rules: CredentialRules,
    private readonly store: SecretStore,
    readonly clientId: string,
    readonly user: string | undefined,
  ) {}

  covers(origin: RequestOrigin): boolean {
    return this.rules.match(this.clientId, origin).length > 0;
  }

  async headersFor(origin: RequestOrigin): Promise<[string, string][]> {
    const headers: [string, string][] = [];
    const host = origin.host;
    for (const rule of this.rules.match(this.clientId, origin)) {
      let value = '';
      for (let i = 0; i < rule.parts.length; i++) {
        if (i % 2 === 0) {
          value += rule.parts[i];
          continue;
        }
        const name = rule.parts[i]!;
        const secret = await this.secret(name, host);
        this.used.add(secret);
        value += secret;
      }
      if (!FIELD_VALUE.test(value)) {
        throw new ToolError(
          'credential_invalid',
          `the value of header "${rule.header}" for ${host} (from a credential rule) holds line breaks or control characters; set its secret again without them`,
        );
      }
      headers.push([rule.header, value]);
    }
    return headers;
  }

  private async secret(name: string, host: string): Promise<string> {
    let pending = this.values.get(name);
    if (!pending) {
      pending = this.store.read(this.clientId, name, this.user);
      this.values.set(name, pending);
    }
    const value = await pending;
    if (value === undefined) throw credentialMissing(name, host, this.clientId, this.user);
    return value;
  }
}

/** A rule names a secret nobody set: say which, and the two ways to set it. */
export function credentialMissing(
  name: string,
  host: string,
  clientId: string,
  user: string | undefined,
): ToolError {
  const query = user === undefined ? '' : `?user=${encodeURIComponent(user)}`;
  const cli = `toolgate secrets set ${clientId}${user === undefined ? '' : ` --user ${user}`} ${name}`;
  const api = `PUT /v1/secrets/${clientId}/${name}${query}`;
  return new ToolError(
    'credential_missing',
    `requests to ${host} need the secret "${name}", which is not set for ${
      user === undefined
        ? `client "${clientId}"`
        : `user "${user}" of client "${clientId}" (nor for the client)`
    }; an admin sets it with \`${cli}\` (the value on stdin) or ${api} {"value": "…"}`,
    {
      details: {
        secret: name,
        host,
        client: clientId,
        ...(user === undefined ? {} : { user }),
        cli,
        api,
      },
    },
  );
}

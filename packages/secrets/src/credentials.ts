/**
 * Credential rules (`credentials:` in the config, top level and per client): for requests to a
 * host, a header whose value names secrets, `Bearer ${secret:github_token}`. The config loader
 * leaves `${secret:…}` as it is; the worker fills it in at use, per call, from the store — the
 * user's secret where the call has a user and that user set one, else the client's.
 */
import { ToolError, type CallCredentials } from '@toolgate/registry';
import { SecretConfigError } from './errors.js';
import { SECRET_NAME, type SecretStore } from './store.js';

export interface CredentialRule {
  /** A host name (`api.github.com`) or every name below one (`*.example.com`). */
  host: string;
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
  host: string;
  subdomains: boolean;
  header: string;
  /** Literal text and secret names, alternating: text, name, text, …, text. */
  parts: string[];
}

function parseRule(rule: CredentialRule, path: string): ParsedRule {
  const rawHost = rule.host.trim().toLowerCase();
  const subdomains = rawHost.startsWith('*.');
  const host = subdomains ? rawHost.slice(2) : rawHost;
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$|^\[[0-9a-f:.]+\]$/.test(host)) {
    throw new SecretConfigError(`${path}/host`, `"${rule.host}" is not a host name (or *.name)`);
  }
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
  return { host, subdomains, header: rule.header.toLowerCase(), parts };
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
   * The rules for a request of `clientId` to `host`, one per header: the client's own rule
   * for a header wins over a shared one.
   */
  match(clientId: string, host: string): ParsedRule[] {
    const name = normalize(host);
    const out = new Map<string, ParsedRule>();
    for (const rule of [...this.shared, ...(this.byClient.get(clientId) ?? [])]) {
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

  covers(host: string): boolean {
    return this.rules.match(this.clientId, host).length > 0;
  }

  async headersFor(host: string): Promise<[string, string][]> {
    const headers: [string, string][] = [];
    for (const rule of this.rules.match(this.clientId, host)) {
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

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml } from 'yaml';
import { sandboxConfigProblems } from '@toolgate/sandbox';
import { CredentialRules, KeyRing, SecretConfigError } from '@toolgate/secrets';
import { ConfigSchema, type Config } from './schema.js';
import { shardProblems } from './shards.js';
import { upstreamProblems } from './upstreams.js';

/** A bad configuration: `field` names where (a JSON-pointer-like path, or an env var). */
export class ConfigError extends Error {
  readonly field: string;

  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super(`invalid configuration: ${field}: ${message}`, options);
    this.name = 'ConfigError';
    this.field = field;
  }
}

type Env = Record<string, string | undefined>;

// Config values may come from ${VAR} substitution as strings: coerce "9000" to 9000 here (and
// only here — tool arguments are never coerced).
const ajv = new Ajv({ useDefaults: true, allErrors: true, coerceTypes: true, strict: false });
const validate = ajv.compile<Config>(ConfigSchema);

/** Env vars that override fields of the file: name → [path, kind]. */
const OVERRIDES: Record<string, [string[], 'string' | 'int' | 'list']> = {
  REDIS_URL: [['redis', 'url'], 'string'],
  TOOLGATE_REDIS_PREFIX: [['redis', 'prefix'], 'string'],
  PORT: [['server', 'port'], 'int'],
  HOST: [['server', 'host'], 'string'],
  TOOLGATE_LOG_LEVEL: [['log', 'level'], 'string'],
  TOOLGATE_WORKER_CONCURRENCY: [['worker', 'concurrency'], 'int'],
  TOOLGATE_SANDBOX_CONCURRENCY: [['worker', 'sandboxConcurrency'], 'int'],
  WORKER_METRICS_PORT: [['worker', 'metricsPort'], 'int'],
  GATEWAY_METRICS_PORT: [['server', 'metricsPort'], 'int'],
  TOOLGATE_CODE_MODE_GATEWAY_URL: [['codeMode', 'gatewayUrl'], 'string'],
  TOOLGATE_SANDBOX_DRIVER: [['sandbox', 'driver'], 'string'],
  TOOLGATE_WORKER_QUEUES: [['worker', 'queues'], 'list'],
  TOOLGATE_CONSOLE_DIR: [['console', 'dir'], 'string'],
  TOOLGATE_SECRETS_KEY: [['secrets', 'key'], 'string'],
};

/**
 * Reads the file named by `TOOLGATE_CONFIG` (YAML or JSON; optional), substitutes
 * `${VAR}` / `${VAR:-default}`, applies env overrides, fills defaults and validates.
 * Throws ConfigError naming the offending field.
 */
export function loadConfig(
  env: Env = process.env,
  file: string | undefined = env.TOOLGATE_CONFIG,
): Config {
  let raw: unknown = {};
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError('TOOLGATE_CONFIG', `cannot read ${file}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    try {
      raw = parseYaml(text) ?? {};
    } catch (err) {
      throw new ConfigError(
        'TOOLGATE_CONFIG',
        `${file} is not valid YAML/JSON: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
  const config = parseConfig(raw, env);
  // Policy files sit beside the configuration that names them.
  const cedar = config.policy.cedar;
  if (file && cedar) {
    const base = dirname(resolve(file));
    cedar.policies = resolve(base, cedar.policies);
    cedar.schema = resolve(base, cedar.schema);
  }
  return config;
}

/** The same as loadConfig for an already-parsed document. */
export function parseConfig(raw: unknown, env: Env = {}): Config {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ConfigError('/', 'the configuration must be a mapping');
  }
  const doc = substitute(raw, '', env) as Record<string, unknown>;
  applyOverrides(doc, env);
  if (!validate(doc))
    throw new ConfigError(fieldOf(validate.errors?.[0]), messageOf(validate.errors));
  checkClients(doc);
  const redisProblem =
    redisProblems(doc)[0] ??
    shardProblems(doc)[0] ??
    sandboxProblems(doc)[0] ??
    upstreamProblems(doc.upstreams, upstreamContext(doc))[0] ??
    secretProblems(doc)[0];
  if (redisProblem) throw new ConfigError(redisProblem.path, redisProblem.message);
  for (const client of doc.clients) {
    if (client.key !== undefined) {
      client.keySha256 = sha256(client.key);
      delete client.key;
    }
    if (client.keySha256 !== undefined) client.keySha256 = client.keySha256.toLowerCase();
  }
  return doc;
}

/** One problem of a config document: where (JSON pointer, or an env var name) and what. */
export interface ConfigProblem {
  path: string;
  message: string;
}

/**
 * Every problem of a document at once (`toolgate config check`), where parseConfig stops at the
 * first: unset `${VAR}`s, bad env overrides, each schema error, client conflicts. `config` is
 * the parsed result when there are none.
 */
export function checkConfig(
  raw: unknown,
  env: Env = {},
): { config?: Config; problems: ConfigProblem[] } {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return { problems: [{ path: '/', message: 'the configuration must be a mapping' }] };
  }
  const problems: ConfigProblem[] = [];
  const doc = substitute(raw, '', env, (p) => problems.push(p)) as Record<string, unknown>;
  const unset = new Set(problems.map((p) => p.path));
  try {
    applyOverrides(doc, env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push({
      path: err.field,
      message: err.message.replace(`invalid configuration: ${err.field}: `, ''),
    });
  }
  const schemaProblems: ConfigProblem[] = [];
  if (!validate(doc)) {
    // A union (anyOf) reports each branch too; its own message is the readable one.
    const unions = new Set(
      (validate.errors ?? []).filter((e) => e.keyword === 'anyOf').map((e) => e.instancePath),
    );
    for (const error of validate.errors ?? []) {
      const field = fieldOf(error);
      if (unset.has(field)) continue; // already reported as the unset variable
      if (error.keyword !== 'anyOf' && unions.has(error.instancePath)) continue;
      const allowed = (error.params as { allowedValues?: unknown[] }).allowedValues;
      const message =
        error.keyword === 'enum' && allowed
          ? `must be one of ${allowed.map((v) => JSON.stringify(v)).join(', ')}`
          : messageOf([error]);
      if (!schemaProblems.some((p) => p.path === field && p.message === message))
        schemaProblems.push({ path: field, message });
    }
  }
  problems.push(...schemaProblems);
  if (Array.isArray(doc.clients) && doc.clients.every((c) => typeof c === 'object' && c !== null))
    problems.push(...clientProblems(doc as Config));
  if (typeof doc.redis === 'object' && doc.redis !== null)
    problems.push(...redisProblems(doc as Config));
  if (schemaProblems.length === 0) problems.push(...shardProblems(doc as Config));
  if (schemaProblems.length === 0) problems.push(...sandboxProblems(doc as Config));
  if (schemaProblems.length === 0)
    problems.push(...upstreamProblems((doc as Config).upstreams, upstreamContext(doc as Config)));
  if (schemaProblems.length === 0) problems.push(...secretProblems(doc as Config));
  if (problems.length > 0) return { problems };
  return { config: parseConfig(raw, env), problems };
}

/** What a stdio upstream is checked against: the sandbox's images and network, the clients. */
function upstreamContext(doc: Config) {
  const scopes = Object.entries(doc.auth?.oauth?.scopes ?? {});
  return {
    images: Object.keys(doc.sandbox.images),
    clients: doc.clients.map((c) => c.id),
    allowNetwork: doc.sandbox.allowNetwork,
    patterns: [
      ...doc.clients.flatMap((c, i) =>
        c.tools.map((pattern, j) => ({ path: `/clients/${i}/tools/${j}`, pattern })),
      ),
      ...scopes.flatMap(([scope, patterns]) =>
        patterns.map((pattern, j) => ({
          path: `/auth/oauth/scopes/${pointer(scope)}/${j}`,
          pattern,
        })),
      ),
    ],
  };
}

/** A key as one JSON-pointer segment (RFC 6901). */
function pointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * `onMissing` collects unset variables (and keeps the `${VAR}` text); without it, the first throws.
 * `${secret:NAME}` (credential rules) is not a variable name and stays as written: the worker
 * fills it in from the secret store at use (docs/credentials.md).
 */
function substitute(
  value: unknown,
  path: string,
  env: Env,
  onMissing?: (problem: ConfigProblem) => void,
): unknown {
  if (typeof value === 'string') {
    return value.replace(
      /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g,
      (match, name: string, fallback?: string) => {
        const v = env[name];
        if (v !== undefined && v !== '') return v;
        if (fallback !== undefined) return fallback;
        const problem = { path: path || '/', message: `environment variable ${name} is not set` };
        if (!onMissing) throw new ConfigError(problem.path, problem.message);
        onMissing(problem);
        return match;
      },
    );
  }
  if (Array.isArray(value))
    return value.map((v, i) => substitute(v, `${path}/${i}`, env, onMissing));
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, substitute(v, `${path}/${k}`, env, onMissing)]),
    );
  }
  return value;
}

function applyOverrides(doc: Record<string, unknown>, env: Env): void {
  for (const [name, [path, kind]] of Object.entries(OVERRIDES)) {
    const text = env[name];
    if (text === undefined || text === '') continue;
    let value: string | number | string[] = text;
    if (kind === 'list')
      value = text
        .split(',')
        .map((v) => v.trim())
        .filter(Boolean);
    if (kind === 'int') {
      if (!/^\d+$/.test(text)) throw new ConfigError(name, `must be an integer, got "${text}"`);
      value = Number(text);
    }
    let node = doc;
    for (const key of path.slice(0, -1)) {
      const next = node[key];
      if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
      node = node[key] as Record<string, unknown>;
    }
    node[path[path.length - 1]!] = value;
  }
}

/** Redis is one of a url, a sentinel set or a cluster. */
function redisProblems(config: Config): ConfigProblem[] {
  const given = (['url', 'sentinel', 'cluster'] as const).filter(
    (k) => config.redis[k] !== undefined,
  );
  if (given.length <= 1) return [];
  return [
    {
      path: `/redis/${given[1]}`,
      message: `set only one of redis.url (REDIS_URL), redis.sentinel and redis.cluster; got ${given.join(' and ')}`,
    },
  ];
}

/** The sandbox section's checks across fields (egress share ≤ its total). */
function sandboxProblems(config: Config): ConfigProblem[] {
  return sandboxConfigProblems(config.sandbox).map((p) => ({ ...p, path: `/sandbox${p.path}` }));
}

/**
 * Credential rules that parse, and a secrets key that is 32 readable bytes — present whenever
 * a rule is (docs/credentials.md): found here, not when the first call would need them.
 */
function secretProblems(config: Config): ConfigProblem[] {
  try {
    const rules = new CredentialRules(config.credentials, config.clients);
    if (KeyRing.load(config.secrets) === undefined && rules.size > 0) {
      return [
        {
          path: '/secrets/keyFile',
          message:
            'credential rules need a secrets key: set secrets.keyFile or TOOLGATE_SECRETS_KEY',
        },
      ];
    }
  } catch (err) {
    if (!(err instanceof SecretConfigError)) throw err;
    return [{ path: err.field, message: err.reason }];
  }
  return [];
}

function checkClients(config: Config): void {
  const first = clientProblems(config)[0];
  if (first) throw new ConfigError(first.path, first.message);
}

function clientProblems(config: Config): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const seen = new Set<string>();
  config.clients.forEach((client, i) => {
    const hasKey = client.key !== undefined;
    const hasHash = client.keySha256 !== undefined;
    // A client without a key signs in with OAuth tokens only.
    const tokensOnly = !hasKey && !hasHash && config.auth?.oauth !== undefined;
    if (hasKey === hasHash && !tokensOnly) {
      problems.push({
        path: `/clients/${i}`,
        message: `client "${client.id}" needs exactly one of key or keySha256${hasKey ? '' : ' (or auth.oauth, for a client signing in with tokens only)'}`,
      });
    }
    if (seen.has(client.id))
      problems.push({ path: `/clients/${i}/id`, message: `duplicate client id "${client.id}"` });
    seen.add(client.id);
  });
  problems.push(...authProblems(config));
  return problems;
}

/** `auth:` against the clients: someone must be able to sign in, and scopes must name tools. */
function authProblems(config: Config): ConfigProblem[] {
  const auth = config.auth;
  if (typeof auth !== 'object' || auth === null) return [];
  const problems: ConfigProblem[] = [];
  const oauth = auth.oauth;
  if (auth.apiKeys === false && oauth === undefined)
    problems.push({
      path: '/auth/apiKeys',
      message: 'with apiKeys false, auth.oauth must be set (nobody could sign in)',
    });
  if (oauth === undefined) return problems;
  if (config.clients.length === 0)
    problems.push({
      path: '/auth/oauth',
      message:
        "needs at least one client in clients: a token's client claim must name a configured client id",
    });
  const clientIds = new Set(config.clients.map((c) => c.id));
  (oauth.tokensWithoutUser ?? []).forEach((id, i) => {
    if (!clientIds.has(id))
      problems.push({ path: `/auth/oauth/tokensWithoutUser/${i}`, message: `no client "${id}"` });
  });
  const urls = [
    ['issuer', oauth.issuer],
    oauth.resource === undefined ? ['audience', oauth.audience] : ['resource', oauth.resource],
  ] as const;
  for (const [name, url] of urls) {
    if (typeof url !== 'string') continue;
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {
      problems.push({
        path: `/auth/oauth/${name}`,
        message:
          name === 'audience'
            ? `"${url}" is not a URL: set auth.oauth.resource to toolgate's URL`
            : `"${url}" is not a URL`,
      });
      continue;
    }
    const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(parsed.hostname);
    if (parsed.protocol !== 'https:' && !loopback)
      problems.push({
        path: `/auth/oauth/${name}`,
        message: `must be an https URL (http only on localhost); got "${url}"`,
      });
  }
  return problems;
}

function fieldOf(error: ErrorObject | undefined): string {
  if (!error) return '/';
  const extra = error.params as { additionalProperty?: string; missingProperty?: string };
  const tail = extra.additionalProperty ?? extra.missingProperty;
  return `${error.instancePath}${tail ? `/${tail}` : ''}` || '/';
}

function messageOf(errors: ErrorObject[] | null | undefined): string {
  const first = errors?.[0];
  if (!first) return 'is invalid';

  if (first.keyword === 'additionalProperties') return 'is not a known field';
  if (first.keyword === 'enum' || first.keyword === 'anyOf') {
    return `${first.message ?? 'is invalid'}`;
  }
  return first.message ?? 'is invalid';
}

/**
 * toolgate as an OAuth 2.1 resource server against a real authorization server (oidc-provider
 * on loopback): tokens minted through its endpoints (client credentials; authorization code
 * with PKCE driven by the official MCP SDK client), tokens forged with jose for every way a
 * token must be refused, step-up for a missing scope, and the user carried on the call.
 */
import { createServer } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import {
  UnauthorizedError,
  type OAuthClientProvider,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type {
  OAuthClientInformationFull,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import { SignJWT, exportSPKI, generateKeyPair, importJWK, base64url } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OTHER_RESOURCE, startAuthServer, type AuthServer } from './support/auth-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

const CAROL = {
  client_id: 'carol',
  client_secret: 'carol-secret-0123456789',
  scope: 'tools:math tools:time',
};
const DAVE = { client_id: 'dave', client_secret: 'dave-secret-0123456789', scope: 'tools:math' };
/** toolgate's own credentials at the authorization server, for introspection. */
const INTROSPECTOR = { client_id: 'toolgate', client_secret: 'toolgate-secret-01234', scope: '' };
const STRANGER = {
  client_id: 'stranger',
  client_secret: 'stranger-secret-012345',
  scope: 'tools:math tools:time',
};

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let as: AuthServer;
let stack: Stack;
let audience: string;

/** Each test speaks from its own source address (trustProxy): its own auth-failure budget. */
function from(address: string, token?: string): Record<string, string> {
  return {
    'x-forwarded-for': address,
    ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
  };
}

async function calculate(token: string, address = '10.0.0.1'): Promise<Response> {
  return stack.call('/tools/calculator/execute', {
    key: null,
    json: { expression: '6*7' },
    headers: from(address, token),
  });
}

/** A JWT signed with the authorization server's own key, with claims as a test wants them. */
async function signed(
  claims: Record<string, unknown>,
  header: Record<string, unknown> = {},
): Promise<string> {
  const key = await importJWK(as.privateJwk, 'RS256');
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: as.issuer,
    aud: audience,
    iat: now,
    exp: now + 300,
    client_id: 'carol',
    scope: 'tools:math',
    sub: 'user-9',
    ...claims,
  })
    .setProtectedHeader({ alg: 'RS256', kid: 'as-key-1', typ: 'at+jwt', ...header })
    .sign(key);
}

beforeAll(async () => {
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({
    audience,
    scopes: ['tools:math', 'tools:time'],
    clients: [
      { client_id: 'alice', client_secret: 'alice-secret-0123456789', scope: CAROL.scope },
      CAROL,
      DAVE,
      INTROSPECTOR,
      STRANGER,
    ],
    opaqueClients: ['dave'],
    opaqueTtlSeconds: 2,
  });
  stack = await startStack({
    port,
    config: {
      server: { port: 0, host: '127.0.0.1', trustProxy: true },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        { id: 'carol', tools: ['*'] }, // tokens only
        { id: 'dave', tools: ['*'] },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      policy: { authFailures: { perMinute: 12 } },
      auth: {
        oauth: {
          issuer: as.issuer,
          audience,
          scopes: { 'tools:math': ['category:math'], 'tools:time': ['current_time'] },
          // Its client-credentials tokens are introspected with no `sub`: they act as dave.
          tokensWithoutUser: ['dave'],
          introspection: {
            clientId: INTROSPECTOR.client_id,
            clientSecret: INTROSPECTOR.client_secret,
            cacheSeconds: 60,
          },
        },
      },
    },
  });
}, 30_000);

afterAll(async () => {
  await stack?.close();
  await as?.close();
});

describe('protected-resource metadata (RFC 9728)', () => {
  it('names the resource, the authorization server and the scopes, where RFC 9728 §3 puts them', async () => {
    const res = await fetch(`${stack.url}/.well-known/oauth-protected-resource/mcp`);
    expect(res.status).toBe(200);
    // §3.3: `resource` is the identifier the well-known URL was made from (…/mcp → <origin>/mcp).
    expect(await res.json()).toEqual({
      resource: audience,
      authorization_servers: [as.issuer],
      scopes_supported: ['tools:math', 'tools:time'],
      bearer_methods_supported: ['header'],
      resource_name: 'toolgate',
    });
    // The root document would be the origin's: toolgate's tokens are for /mcp, not for it.
    const root = await fetch(`${stack.url}/.well-known/oauth-protected-resource`);
    expect(root.status).not.toBe(200);
    expect(JSON.stringify(await root.json())).not.toContain('"resource"');
  });

  it('answers a request without credentials 401 with the metadata URL, on /mcp and the HTTP routes', async () => {
    const metadata = `resource_metadata="${stack.url}/.well-known/oauth-protected-resource/mcp"`;
    const mcp = await fetch(`${stack.url}/mcp`, {
      method: 'POST',
      headers: { ...from('10.0.1.1'), 'content-type': 'application/json' },
      body: '{}',
    });
    expect(mcp.status).toBe(401);
    expect(mcp.headers.get('www-authenticate')).toBe(`Bearer ${metadata}`);
    const http = await stack.call('/tools/calculator/execute', {
      key: null,
      json: {},
      headers: from('10.0.1.1'),
    });
    expect(http.status).toBe(401);
    expect(http.headers.get('www-authenticate')).toBe(`Bearer ${metadata}`);
  });
});

describe('client-credentials tokens', () => {
  it('a token from the authorization server calls the tools of its scopes, as its client', async () => {
    const { access_token } = await as.clientCredentials(CAROL, 'tools:math');
    const res = await calculate(access_token);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: string; result: unknown };
    expect(body.result).toBe(42);
    const record = await stack.call(`/v1/calls/${body.id}`, {
      key: null,
      headers: from('10.0.0.1', access_token),
    });
    expect(await record.json()).toMatchObject({ client: 'carol', tool: 'calculator' });
    const me = await stack.call('/v1/me', { key: null, headers: from('10.0.0.1', access_token) });
    expect(await me.json()).toMatchObject({
      client: 'carol',
      admin: false,
      scopes: ['tools:math'],
    });
  });

  it('a tool its client has but its scopes lack is a 403 step-up naming the scope', async () => {
    const { access_token } = await as.clientCredentials(CAROL, 'tools:math');
    const res = await stack.call('/tools/current_time/execute', {
      key: null,
      json: {},
      headers: from('10.0.0.2', access_token),
    });
    expect(res.status).toBe(403);
    expect(res.headers.get('www-authenticate')).toMatch(
      /^Bearer error="insufficient_scope", scope="tools:math tools:time", resource_metadata="[^"]+\/\.well-known\/oauth-protected-resource\/mcp"/,
    );
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
      'insufficient_scope',
    );
    // The listing shows only what the token may call.
    const tools = await stack.call('/tools', {
      key: null,
      headers: from('10.0.0.2', access_token),
    });
    const names = ((await tools.json()) as { name: string }[]).map((t) => t.name);
    expect(names).toContain('calculator');
    expect(names).not.toContain('current_time');
  });

  it('an MCP batch (2025-03-26) is stepped up as its elements are: one tools/call outside the scopes is a 403', async () => {
    const { access_token } = await as.clientCredentials(CAROL, 'tools:math');
    const call = (id: number, name: string, args: unknown) => ({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name, arguments: args },
    });
    const res = await stack.call('/mcp', {
      key: null,
      json: [call(1, 'calculator', { expression: '6*7' }), call(2, 'current_time', {})],
      headers: { ...from('10.0.0.3', access_token), accept: 'application/json, text/event-stream' },
    });
    expect(res.status).toBe(403);
    expect(res.headers.get('www-authenticate')).toMatch(
      /^Bearer error="insufficient_scope", scope="tools:math tools:time"/,
    );
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: 2, error: { code: -32600 } });
  });

  it('API keys keep working beside tokens', async () => {
    const res = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { result: unknown }).result).toBe(2);
  });
});

describe('opaque tokens (RFC 7662 introspection)', () => {
  it('are introspected once, reused from the cache, and not past their expiry', async () => {
    const { access_token } = await as.clientCredentials(DAVE, 'tools:math');
    expect(access_token.split('.')).toHaveLength(1); // opaque, not a JWT
    const before = as.requests.get('/token/introspection') ?? 0;
    for (let i = 0; i < 3; i++)
      expect((await calculate(access_token, '10.0.5.1')).status).toBe(200);
    expect(as.requests.get('/token/introspection')).toBe(before + 1);
    // The token lives 2 s; the cache (60 s) must not outlive it.
    await new Promise((r) => setTimeout(r, 2600));
    const late = await calculate(access_token, '10.0.5.1');
    expect(late.status).toBe(401);
    expect(late.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    expect(as.requests.get('/token/introspection')).toBe(before + 2);
  });

  it('an opaque token for another resource is refused', async () => {
    const { access_token } = await as.clientCredentials(DAVE, 'tools:math', OTHER_RESOURCE);
    const res = await calculate(access_token, '10.0.5.2');
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/not for this resource/);
  });
});

describe('refused tokens', () => {
  const cases: [string, () => Promise<string>, RegExp][] = [
    ['expired', () => signed({ exp: Math.floor(Date.now() / 1000) - 120 }), /expired/],
    ['not yet valid', () => signed({ nbf: Math.floor(Date.now() / 1000) + 600 }), /not valid yet/],
    [
      'issued in the future (iat past the skew)',
      () => signed({ iat: Math.floor(Date.now() / 1000) + 120 }),
      /issued in the future/,
    ],
    [
      'whose client_id is not a string (never azp instead)',
      () => signed({ client_id: 12345, azp: 'carol' }),
      /client claim \(client_id\) is not a non-empty string/,
    ],
    [
      'for another audience',
      () => signed({ aud: 'https://elsewhere.example/mcp' }),
      /not for this resource/,
    ],
    ['from another issuer', () => signed({ iss: 'https://evil.example' }), /another issuer/],
    [
      'signed with an unknown key',
      async () => {
        const { privateKey } = await generateKeyPair('RS256');
        return new SignJWT({ client_id: 'carol', scope: 'tools:math' })
          .setProtectedHeader({ alg: 'RS256', kid: 'not-a-key-of-the-issuer' })
          .setIssuer(as.issuer)
          .setAudience(audience)
          .setExpirationTime('5m')
          .sign(privateKey);
      },
      /signing key is not among/,
    ],
    [
      'with alg none',
      async () => {
        const now = Math.floor(Date.now() / 1000);
        const part = (o: object) => base64url.encode(JSON.stringify(o));
        return `${part({ alg: 'none', typ: 'JWT' })}.${part({ iss: as.issuer, aud: audience, client_id: 'carol', scope: 'tools:math', exp: now + 300 })}.`;
      },
      /algorithm/,
    ],
    [
      'HS256-signed with the JWKS public key',
      async () => {
        const pem = await exportSPKI(
          (await importJWK(as.publicJwk, 'RS256', { extractable: true })) as Parameters<
            typeof exportSPKI
          >[0],
        );
        return new SignJWT({ client_id: 'carol', scope: 'tools:math' })
          .setProtectedHeader({ alg: 'HS256', kid: 'as-key-1' })
          .setIssuer(as.issuer)
          .setAudience(audience)
          .setExpirationTime('5m')
          .sign(new TextEncoder().encode(pem));
      },
      /algorithm/,
    ],
    [
      'minted by the authorization server for another resource',
      async () => (await as.clientCredentials(CAROL, 'tools:math', OTHER_RESOURCE)).access_token,
      /not for this resource/,
    ],
    [
      'of a client this server does not have',
      async () => (await as.clientCredentials(STRANGER, 'tools:math')).access_token,
      /client .stranger. is not a client/,
    ],
  ];
  it.each(cases)('a token %s is answered 401 invalid_token', async (_name, make, reason) => {
    const token = await make();
    const res = await calculate(token, `10.0.2.${cases.findIndex((c) => c[0] === _name)}`);
    expect(res.status).toBe(401);
    const challenge = res.headers.get('www-authenticate') ?? '';
    expect(challenge).toMatch(
      /^Bearer resource_metadata="[^"]+", error="invalid_token", error_description="/,
    );
    expect(challenge).toMatch(reason);
    const body = (await res.json()) as { error: { code: string; details: { reason: string } } };
    expect(body.error.code).toBe('unauthorized');
    expect(body.error.details.reason).toMatch(reason);
  });

  it('the same token with its real claims is accepted (the cases differ in one thing each)', async () => {
    const res = await calculate(await signed({}), '10.0.2.99');
    expect(res.status).toBe(200);
    // Inside the skew (30 s) an early iat passes; without client_id, azp names the client.
    const early = await signed({ iat: Math.floor(Date.now() / 1000) + 10 });
    expect((await calculate(early, '10.0.2.99')).status).toBe(200);
    const byAzp = await signed({ client_id: undefined, azp: 'carol' });
    expect((await calculate(byAzp, '10.0.2.99')).status).toBe(200);
  });

  it('bad tokens count toward policy.authFailures of their source address', async () => {
    const bad = await signed({ aud: 'https://elsewhere.example/mcp' });
    const statuses: number[] = [];
    for (let i = 0; i < 13; i++) statuses.push((await calculate(bad, '10.0.3.1')).status);
    expect(statuses.slice(0, 12)).toEqual(Array(12).fill(401));
    expect(statuses[12]).toBe(429);
    // A good token from another address is not affected.
    expect((await calculate(await signed({}), '10.0.3.2')).status).toBe(200);
  });
});

/** A person's MCP client: a pre-registered client id, tokens in memory, the browser driven. */
class TestOAuthProvider implements OAuthClientProvider {
  private saved: OAuthTokens | undefined;
  private verifier = '';
  /** The callback query of the last sign-in, once the browser got there. */
  callback: Promise<URLSearchParams> | undefined;

  constructor(
    private readonly server: AuthServer,
    private readonly client: { client_id: string; client_secret: string },
  ) {}

  get redirectUrl(): string {
    return this.server.redirectUri;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'toolgate test',
      redirect_uris: [this.server.redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    };
  }
  clientInformation(): OAuthClientInformationFull {
    return { ...this.clientMetadata, ...this.client };
  }
  tokens(): OAuthTokens | undefined {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens): void {
    this.saved = tokens;
  }
  redirectToAuthorization(url: URL): void {
    this.callback = this.server.authorize(url);
  }
  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }
  codeVerifier(): string {
    return this.verifier;
  }
}

describe('the MCP SDK client, knowing only the URL', () => {
  it('discovers the authorization server, signs a user in (code + PKCE), calls a tool, and is stepped up', async () => {
    const user = `user-${randomUUID().slice(0, 8)}`;
    as.signIn.user = user;
    as.signIn.grantable = ['tools:time']; // the person grants time only, at first
    const provider = new TestOAuthProvider(as, {
      client_id: 'carol',
      client_secret: CAROL.client_secret,
    });
    const url = new URL(`${stack.url}/mcp`);
    const connect = async () => {
      const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
      const client = new McpClient({ name: 'oauth-test', version: '1.0.0' });
      await client.connect(transport);
      return { client, transport };
    };

    // No token: 401 → metadata → authorization server → the browser → back with a code.
    const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
    await expect(
      new McpClient({ name: 'oauth-test', version: '1.0.0' }).connect(first),
    ).rejects.toThrow(UnauthorizedError);
    const params = await provider.callback!;
    expect(params.get('code')).toBeTruthy();
    await first.finishAuth(params.get('code')!);
    expect(provider.tokens()?.scope).toBe('tools:time');

    let { client, transport } = await connect();
    const listed = (await client.listTools()).tools.map((t) => t.name);
    expect(listed).toContain('current_time');
    expect(listed).not.toContain('calculator');
    const time = await client.callTool({ name: 'current_time', arguments: {} });
    expect(time.isError).toBeFalsy();

    // The call is the user's: GET /v1/calls/{id} shows who.
    const direct = await stack.call('/tools/current_time/execute', {
      key: null,
      json: {},
      headers: from('10.0.4.1', provider.tokens()!.access_token),
    });
    const { id } = (await direct.json()) as { id: string };
    const record = await stack.call(`/v1/calls/${id}`, {
      key: null,
      headers: from('10.0.4.1', provider.tokens()!.access_token),
    });
    expect(await record.json()).toMatchObject({ client: 'carol', user, tool: 'current_time' });
    await expect
      .poll(async () => {
        const audit = await stack.call(`/v1/audit?client=carol&callId=${id}`, { key: KEYS.admin });
        return (await audit.json()) as unknown[];
      })
      .toEqual([expect.objectContaining({ event: 'call', client: 'carol', user, callId: id })]);

    // calculator needs tools:math: 403 insufficient_scope → the SDK signs in again for it.
    as.signIn.grantable = ['tools:time', 'tools:math'];
    provider.callback = undefined;
    await expect(
      client.callTool({ name: 'calculator', arguments: { expression: '6*7' } }),
    ).rejects.toThrow(UnauthorizedError);
    expect(provider.callback).toBeDefined();
    const stepUp = await provider.callback!;
    await transport.finishAuth(stepUp.get('code')!);
    expect(provider.tokens()?.scope?.split(' ').sort()).toEqual(['tools:math', 'tools:time']);
    await client.close();

    ({ client, transport } = await connect());
    const sum = await client.callTool({ name: 'calculator', arguments: { expression: '6*7' } });
    expect(sum.isError).toBeFalsy();
    expect(JSON.stringify(sum.content)).toContain('42');
    await client.close();
  }, 30_000);
});

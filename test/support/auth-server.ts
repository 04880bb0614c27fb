/**
 * A real OAuth 2.1 / OpenID authorization server for the tests: `oidc-provider` (OpenID
 * Certified) on loopback, issuing RFC 9068 JWT access tokens for toolgate's resource (RFC 8707
 * resource indicators) and for one other resource. Its sign-in and consent pages are replaced
 * by a handler that signs in `signIn.user` and grants only `signIn.grantable` of the scopes
 * asked for — the decisions a person would make on those pages.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider, { errors } from 'oidc-provider';

export interface AuthServerClient {
  client_id: string;
  client_secret: string;
  /** Resource scopes the client may ask for. */
  scope: string;
}

export interface AuthServer {
  issuer: string;
  /** The signing key pair's private JWK (tests sign malformed tokens with it) and public JWK. */
  privateJwk: JWK;
  publicJwk: JWK;
  /** Requests served, by path (`/token/introspection`, `/jwks`, …). */
  requests: Map<string, number>;
  /** Who signs in at the next authorization, and which scopes that person grants. */
  signIn: { user: string; grantable: string[] };
  /** The callback every client is registered with. */
  redirectUri: string;
  /** A client-credentials token for `resource` with `scope`. */
  clientCredentials(
    client: AuthServerClient,
    scope: string,
    resource?: string,
  ): Promise<{ access_token: string; scope?: string }>;
  /**
   * Drives an authorization URL through sign-in and consent as a browser would (cookies,
   * redirects); returns the callback URL's query (code, state, iss).
   */
  authorize(url: URL): Promise<URLSearchParams>;
  /**
   * An access token for `user` signed in through `client`: an authorization request with PKCE
   * for `resource` and `scope`, sign-in and consent (authorize), the code exchanged at the
   * token endpoint — the real endpoints throughout.
   */
  userToken(
    client: AuthServerClient,
    user: string,
    scope: string,
    resource: string,
  ): Promise<{ access_token: string; scope?: string }>;
  close(): Promise<void>;
}

export const OTHER_RESOURCE = 'https://other-resource.example/api';

export async function startAuthServer(options: {
  audience: string;
  /** Resource scopes toolgate's tokens may carry. */
  scopes: string[];
  clients: AuthServerClient[];
  /** Clients whose tokens for toolgate are opaque (introspected), living `opaqueTtlSeconds`. */
  opaqueClients?: string[];
  opaqueTtlSeconds?: number;
}): Promise<AuthServer> {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  const privateJwk = {
    ...(await exportJWK(privateKey)),
    kid: 'as-key-1',
    alg: 'RS256',
    use: 'sig',
  };
  const publicJwk = { ...(await exportJWK(publicKey)), kid: 'as-key-1', alg: 'RS256', use: 'sig' };
  const redirectUri = 'http://127.0.0.1/callback';
  const requests = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0]!;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    if (req.url?.startsWith('/interaction/')) {
      interact(req, res).catch((err: unknown) => {
        res.writeHead(500).end(String(err));
      });
      return;
    }
    void provider.callback()(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const signIn = { user: 'user-1', grantable: [...options.scopes] };

  // Requests reach it only after it exists: the server's handler runs once tests ask.
  const provider = new Provider(issuer, {
    clients: options.clients.map(({ scope: _resourceScopes, ...c }) => ({
      ...c,
      grant_types: ['client_credentials', 'authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: [redirectUri],
      application_type: 'native',
      token_endpoint_auth_method: 'client_secret_basic',
    })),
    jwks: { keys: [privateJwk] },
    cookies: { keys: ['test-cookie-key-0123456789'] },
    pkce: { required: () => true },
    ttl: {
      // The resource server's lifetime (getResourceServerInfo below) decides.
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 300,
      AuthorizationCode: 60,
      ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 300,
      Grant: 600,
      Interaction: 600,
      Session: 600,
    },
    scopes: ['openid', 'offline_access'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      // toolgate introspects with credentials of its own; no other client may.
      introspection: {
        enabled: true,
        allowedPolicy: (_ctx, client) => client.clientId === 'toolgate',
      },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => options.audience,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource, client) => {
          if (resource !== options.audience && resource !== OTHER_RESOURCE)
            throw new errors.InvalidTarget();
          if (options.opaqueClients?.includes(client.clientId))
            return {
              scope: options.scopes.join(' '),
              audience: resource,
              accessTokenTTL: options.opaqueTtlSeconds ?? 300,
              accessTokenFormat: 'opaque',
            };
          return {
            scope: options.scopes.join(' '),
            audience: resource,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
  });
  provider.on('server_error', (_ctx, err) => console.error('oidc-provider', err));

  /** The person at the sign-in and consent pages: signs in, grants the grantable scopes. */
  async function interact(
    req: Parameters<Provider['interactionDetails']>[0],
    res: Parameters<Provider['interactionDetails']>[1],
  ): Promise<void> {
    const details = await provider.interactionDetails(req, res);
    const { prompt, params } = details;
    if (prompt.name === 'login') {
      await provider.interactionFinished(
        req,
        res,
        { login: { accountId: signIn.user } },
        { mergeWithLastSubmission: false },
      );
      return;
    }
    const accountId = details.session!.accountId;
    const grant = details.grantId
      ? (await provider.Grant.find(details.grantId))!
      : new provider.Grant({ accountId, clientId: params.client_id as string });
    const asked = String(params.scope ?? '').split(' ');
    const resource = (params.resource as string | undefined) ?? options.audience;
    const granted = asked.filter((s) => signIn.grantable.includes(s));
    const refused = asked.filter((s) => !signIn.grantable.includes(s) && s !== 'offline_access');
    if (granted.length > 0) grant.addResourceScope(resource, granted.join(' '));
    if (refused.length > 0) grant.rejectResourceScope(resource, refused.join(' '));
    if (asked.includes('offline_access')) grant.addOIDCScope('offline_access');
    const grantId = await grant.save();
    await provider.interactionFinished(
      req,
      res,
      { consent: { grantId } },
      { mergeWithLastSubmission: true },
    );
  }

  return {
    issuer,
    requests,
    privateJwk,
    publicJwk,
    signIn,
    redirectUri,
    async clientCredentials(client, scope, resource = options.audience) {
      const res = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from(`${client.client_id}:${client.client_secret}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: new URLSearchParams({ grant_type: 'client_credentials', scope, resource }),
      });
      const body = (await res.json()) as { access_token: string; scope?: string };
      if (!res.ok) throw new Error(`token endpoint: ${res.status} ${JSON.stringify(body)}`);
      return body;
    },
    async authorize(url) {
      const cookies = new Map<string, string>();
      let next = url.href;
      for (let hop = 0; hop < 20; hop++) {
        const res = await fetch(next, {
          redirect: 'manual',
          headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
        });
        for (const line of res.headers.getSetCookie()) {
          const [pair = ''] = line.split(';');
          const eq = pair.indexOf('=');
          cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1));
        }
        await res.arrayBuffer();
        const location = res.headers.get('location');
        if (!location) throw new Error(`authorization stopped at ${next}: HTTP ${res.status}`);
        const target = new URL(location, next);
        if (target.href.startsWith(redirectUri)) return target.searchParams;
        next = target.href;
      }
      throw new Error('too many redirects during authorization');
    },
    async userToken(this: AuthServer, client, user, scope, resource) {
      const verifier = randomBytes(32).toString('base64url');
      const url = new URL(`${issuer}/auth`);
      url.search = new URLSearchParams({
        client_id: client.client_id,
        response_type: 'code',
        redirect_uri: redirectUri,
        scope,
        code_challenge: createHash('sha256').update(verifier).digest('base64url'),
        code_challenge_method: 'S256',
        resource,
        state: randomUUID(),
      }).toString();
      signIn.user = user;
      const code = (await this.authorize(url)).get('code');
      if (!code) throw new Error('no authorization code');
      const res = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from(`${client.client_id}:${client.client_secret}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code,
          redirect_uri: redirectUri,
          code_verifier: verifier,
          resource,
        }),
      });
      const body = (await res.json()) as { access_token: string; scope?: string };
      if (!res.ok) throw new Error(`token endpoint: ${res.status} ${JSON.stringify(body)}`);
      return body;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

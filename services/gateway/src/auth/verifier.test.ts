import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseConfig, type OAuthConfig } from '@toolgate/config';
import { SignJWT, exportJWK, generateKeyPair, type JWK } from 'jose';
import { afterEach, describe, expect, it } from 'vitest';
import { AuthServerError } from './fetch-json.js';
import { MAX_KEYS } from './jwks.js';
import { TokenRefused, TokenVerifier } from './verifier.js';

/** A stand-in authorization server: OpenID discovery and a JWKS the test changes at will. */
interface FakeServer {
  issuer: string;
  keys: JWK[];
  jwksFetches: number;
  /** What discovery answers as the issuer (a mix-up when it differs). */
  claimedIssuer?: string;
  close(): Promise<void>;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise<void>((r) => s.close(() => r()));
});

async function fakeServer(): Promise<FakeServer> {
  const state = { keys: [] as JWK[], jwksFetches: 0 } as FakeServer;
  const server = createServer((req, res) => {
    if (req.url === '/.well-known/openid-configuration') {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          issuer: state.claimedIssuer ?? state.issuer,
          jwks_uri: `${state.issuer}/jwks`,
        }),
      );
    } else if (req.url === '/jwks') {
      state.jwksFetches++;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: state.keys }));
    } else res.writeHead(404).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

const AUDIENCE = 'http://127.0.0.1:8080/mcp';

function oauthConfig(issuer: string, extra: Record<string, unknown> = {}): OAuthConfig {
  return parseConfig({
    clients: [{ id: 'carol', keySha256: 'a'.repeat(64) }],
    auth: { oauth: { issuer, audience: AUDIENCE, ...extra } },
  }).auth.oauth!;
}

async function keyPair(kid: string) {
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' };
  const sign = (issuer: string, expiresIn: string = '5m') =>
    new SignJWT({ client_id: 'carol', scope: 'tools:math', sub: 'u1' })
      .setProtectedHeader({ alg: 'ES256', kid })
      .setIssuer(issuer)
      .setAudience(AUDIENCE)
      .setExpirationTime(expiresIn)
      .sign(privateKey);
  return { publicJwk, sign };
}

describe('TokenVerifier', () => {
  it('finds the keys through OpenID discovery when RFC 8414 metadata is absent', async () => {
    const as = await fakeServer();
    const a = await keyPair('a');
    as.keys = [a.publicJwk];
    const verifier = new TokenVerifier(oauthConfig(as.issuer));
    await expect(verifier.verify(await a.sign(as.issuer))).resolves.toMatchObject({
      clientId: 'carol',
      user: 'u1',
      scopes: ['tools:math'],
    });
  });

  it('refuses metadata that names another issuer (mix-up), as the server being unusable', async () => {
    const as = await fakeServer();
    as.claimedIssuer = 'https://someone-else.example';
    const a = await keyPair('a');
    as.keys = [a.publicJwk];
    const verifier = new TokenVerifier(oauthConfig(as.issuer));
    await expect(verifier.verify(await a.sign(as.issuer))).rejects.toThrow(AuthServerError);
  });

  it('takes in a rotated key: a token with a new kid makes it fetch the set again', async () => {
    const as = await fakeServer();
    const a = await keyPair('a');
    const b = await keyPair('b');
    as.keys = [a.publicJwk];
    const verifier = new TokenVerifier(oauthConfig(as.issuer), { cooldownMs: 100 });
    await verifier.verify(await a.sign(as.issuer));
    expect(as.jwksFetches).toBe(1);
    as.keys = [a.publicJwk, b.publicJwk]; // the server rotates in key b
    await new Promise((r) => setTimeout(r, 150));
    await expect(verifier.verify(await b.sign(as.issuer))).resolves.toMatchObject({
      clientId: 'carol',
    });
    expect(as.jwksFetches).toBe(2);
    await verifier.verify(await a.sign(as.issuer));
    expect(as.jwksFetches).toBe(2); // known keys: no fetch
  });

  it('a flood of tokens with unknown kids costs one fetch per cooldown, not one each', async () => {
    const as = await fakeServer();
    const a = await keyPair('a');
    as.keys = [a.publicJwk];
    const verifier = new TokenVerifier(oauthConfig(as.issuer));
    await verifier.verify(await a.sign(as.issuer));
    const strangers = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => (await keyPair(`x${i}`)).sign(as.issuer)),
    );
    const results = await Promise.allSettled(strangers.map((t) => verifier.verify(t)));
    expect(results.every((r) => r.status === 'rejected' && r.reason instanceof TokenRefused)).toBe(
      true,
    );
    expect(as.jwksFetches).toBe(1);
  });

  it('a verified token is reused from memory, but never past its expiry', async () => {
    const as = await fakeServer();
    const a = await keyPair('a');
    as.keys = [a.publicJwk];
    const verifier = new TokenVerifier(oauthConfig(as.issuer, { clockSkewSeconds: 0 }));
    const token = await a.sign(as.issuer, '2s');
    await expect(verifier.verify(token)).resolves.toMatchObject({ clientId: 'carol' });
    await expect(verifier.verify(token)).resolves.toMatchObject({ clientId: 'carol' });
    await new Promise((r) => setTimeout(r, 2100));
    await expect(verifier.verify(token)).rejects.toThrow(/expired/);
  });

  it(`refuses a key set of more than ${MAX_KEYS} keys`, async () => {
    const as = await fakeServer();
    const a = await keyPair('a');
    as.keys = Array.from({ length: MAX_KEYS + 1 }, (_, i) => ({ ...a.publicJwk, kid: `k${i}` }));
    const verifier = new TokenVerifier(oauthConfig(as.issuer));
    await expect(verifier.verify(await a.sign(as.issuer))).rejects.toThrow(/more than 100/);
  });
});

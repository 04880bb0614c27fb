/**
 * toolgate as an OAuth 2.1 resource server: a valid token becomes one of the configured
 * clients (its client claim), acting for a user (its user claim), allowed the tools of its
 * client ∩ the tools of its scopes. Also the challenges (`WWW-Authenticate`) and the RFC 9728
 * protected-resource metadata that let an MCP client find the authorization server by itself.
 */
import type { OAuthConfig } from '@toolgate/config';
import { ToolScope, type Tool } from '@toolgate/registry';
import type { Client, Clients, ToolFilter } from '../clients.js';
import { ApiError } from '../errors.js';
import { TokenRefused, TokenVerifier } from './verifier.js';

/** A user claim longer than this is refused (it is stored with every call). */
export const MAX_USER_LENGTH = 256;

export class OAuthResource {
  readonly verifier: TokenVerifier;
  /** Where this resource's RFC 9728 metadata is (`resource_metadata` in challenges). */
  readonly metadataUrl: string;
  private readonly byScope: ReadonlyMap<string, ToolScope>;

  constructor(
    private readonly config: OAuthConfig,
    private readonly clients: Clients,
    jwksOptions: { cooldownMs?: number; maxAgeMs?: number } = {},
  ) {
    this.verifier = new TokenVerifier(config, jwksOptions);
    this.byScope = new Map(Object.entries(config.scopes).map(([s, p]) => [s, new ToolScope(p)]));
    // RFC 9728 §3.1: the well-known segment goes between the host and the resource's path.
    const resource = new URL(config.resource ?? config.audience);
    const path = resource.pathname.replace(/\/$/, '');
    this.metadataUrl = `${resource.origin}/.well-known/oauth-protected-resource${path}`;
  }

  /** The paths this gateway answers the metadata on: the root one, `/mcp`, the resource's. */
  get metadataPaths(): string[] {
    const own = new URL(this.metadataUrl).pathname;
    return [
      ...new Set([
        '/.well-known/oauth-protected-resource',
        '/.well-known/oauth-protected-resource/mcp',
        own,
      ]),
    ];
  }

  /** RFC 9728 protected-resource metadata. */
  resourceMetadata(): Record<string, unknown> {
    return {
      resource: this.config.resource ?? this.config.audience,
      authorization_servers: [this.config.issuer],
      ...(this.byScope.size > 0 ? { scopes_supported: [...this.byScope.keys()] } : {}),
      bearer_methods_supported: ['header'],
      resource_signing_alg_values_supported: this.config.algorithms,
      resource_name: 'toolgate',
    };
  }

  /** `WWW-Authenticate` for a 401: where to sign in, and why the token sent was refused. */
  challenge(refused?: string): string {
    return [
      `Bearer resource_metadata="${this.metadataUrl}"`,
      ...(refused === undefined
        ? []
        : [`error="invalid_token"`, `error_description="${quoted(refused)}"`]),
    ].join(', ');
  }

  /** The client a token signs in as; TokenRefused / AuthServerError as the verifier says. */
  async authenticate(token: string): Promise<Client> {
    const verified = await this.verifier.verify(token);
    const client = this.clients.byId(verified.clientId);
    if (!client)
      throw new TokenRefused(
        `the token's client "${verified.clientId.slice(0, 64)}" is not a client of this server`,
      );
    if (verified.user !== undefined && verified.user.length > MAX_USER_LENGTH)
      throw new TokenRefused(`the token's user claim is longer than ${MAX_USER_LENGTH} characters`);
    return this.asToken(client, verified.scopes, verified.user);
  }

  /**
   * `client` as a token with `scopes` for `user` would make it: what `authenticate` answers,
   * and what a code-mode script started with such a token acts as (docs/code-mode.md).
   */
  asToken(client: Client, scopes: readonly string[], user?: string): Client {
    const grant = new TokenGrant(scopes, client.scope, this.byScope, this.metadataUrl);
    return {
      ...client,
      scope: grant,
      grant,
      ...(user === undefined ? {} : { user }),
    };
  }
}

/**
 * What a token may call: its client's tools ∩ the tools of its scopes (every tool of its
 * client when no scopes are configured). A tool its client has but its scopes lack is a
 * step-up: 403 `insufficient_scope` naming a scope that would allow it.
 */
export class TokenGrant implements ToolFilter {
  constructor(
    readonly scopes: readonly string[],
    private readonly clientScope: ToolFilter,
    private readonly byScope: ReadonlyMap<string, ToolScope>,
    private readonly metadataUrl: string,
  ) {}

  /**
   * The scopes held that this server configures: all that decide what the token may call
   * (carried with a code-mode script, so bounded by the configuration, not by the token).
   */
  configured(): string[] {
    return this.scopes.filter((s) => this.byScope.has(s));
  }

  allows(tool: Pick<Tool, 'name' | 'category'>): boolean {
    if (!this.clientScope.allows(tool)) return false;
    if (this.byScope.size === 0) return true;
    return this.scopes.some((s) => this.byScope.get(s)?.allows(tool) === true);
  }

  /** The 403 to answer when only a scope is missing for `tool`; undefined otherwise. */
  stepUp(tool: Pick<Tool, 'name' | 'category'>): ApiError | undefined {
    if (this.allows(tool) || !this.clientScope.allows(tool)) return undefined;
    const needed = [...this.byScope].find(([, scope]) => scope.allows(tool))?.[0];
    if (needed === undefined) return undefined;
    // The scopes held plus the one missing: a client that asks for exactly this keeps its tools.
    const scope = [...new Set([...this.scopes, needed])].join(' ');
    return new ApiError(
      'insufficient_scope',
      `the token's scopes do not cover "${tool.name}"; sign in again with scope "${needed}"`,
      {
        details: { requiredScope: needed, scope },
        headers: {
          'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${quoted(scope)}", resource_metadata="${this.metadataUrl}", error_description="${quoted(`scope ${needed} is needed for ${tool.name}`)}"`,
        },
      },
    );
  }
}

/** The refusal for a tool outside a client's scope: a step-up for a token, else 403. */
export function outOfScope(client: Client, tool: Pick<Tool, 'name' | 'category'>): ApiError {
  return (
    client.grant?.stepUp(tool) ??
    new ApiError('forbidden', `client "${client.id}" may not call "${tool.name}"`)
  );
}

/** Text safe inside an RFC 7235 quoted-string. */
function quoted(text: string): string {
  return text.replace(/[\\"]/g, "'").replace(/[^\x20-\x7e]/g, '?');
}

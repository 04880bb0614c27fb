/**
 * toolgate as an OAuth 2.1 resource server: a valid token becomes one of the configured
 * clients (its client claim), acting for a user (its user claim), allowed the tools of its
 * client ∩ the tools of its scopes, and an admin only with the admin scope on an admin client.
 * Also the challenges (`WWW-Authenticate`) and the RFC 9728 protected-resource metadata that
 * let an MCP client find the authorization server by itself.
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
    jwksOptions: { cooldownMs?: number; maxAgeMs?: number; groupsClaim?: string } = {},
  ) {
    this.verifier = new TokenVerifier(config, jwksOptions);
    this.byScope = new Map(Object.entries(config.scopes).map(([s, p]) => [s, new ToolScope(p)]));
    // RFC 9728 §3.1: the well-known segment goes between the host and the resource's path.
    const resource = new URL(config.resource ?? config.audience);
    const path = resource.pathname.replace(/\/$/, '');
    this.metadataUrl = `${resource.origin}/.well-known/oauth-protected-resource${path}`;
  }

  /**
   * The one path this gateway answers the metadata on. RFC 9728 §3.3: a document's `resource`
   * is the identifier its well-known URL was made from, so the document for the resource
   * `https://host/mcp` lives at `/.well-known/oauth-protected-resource/mcp` and nowhere else
   * (the root one would describe `https://host`, a resource toolgate's tokens are not for).
   */
  get metadataPath(): string {
    return new URL(this.metadataUrl).pathname;
  }

  /**
   * RFC 9728 protected-resource metadata. No `resource_signing_alg_values_supported`: it is
   * for signed responses, which toolgate does not send, not for the tokens it accepts. The
   * admin scope is not in `scopes_supported` either: a client that asks for every scope listed
   * (the MCP SDK does) must not ask for admin rights by default.
   */
  resourceMetadata(): Record<string, unknown> {
    return {
      resource: this.config.resource ?? this.config.audience,
      authorization_servers: [this.config.issuer],
      ...(this.byScope.size > 0 ? { scopes_supported: [...this.byScope.keys()] } : {}),
      bearer_methods_supported: ['header'],
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
    // Without a user the token would act as the whole client: every user's calls, sessions
    // and workspace. Only where the config says so (client credentials).
    if (verified.user === undefined && !this.config.tokensWithoutUser.includes(client.id))
      throw new TokenRefused(
        `the token names no user (claim "${this.config.userClaim}"), and client "${client.id}" takes no tokens without one (auth.oauth.tokensWithoutUser)`,
        { code: 'no_user' },
      );
    const signedIn = this.asToken(client, verified.scopes, verified.user);
    return verified.groups === undefined ? signedIn : { ...signedIn, groups: verified.groups };
  }

  /**
   * `client` as a token with `scopes` for `user` would make it: what `authenticate` answers,
   * and what a code-mode script started with such a token acts as (docs/code-mode.md). An
   * admin client's token is an admin only with the admin scope.
   */
  asToken(client: Client, scopes: readonly string[], user?: string): Client {
    const adminScope = client.admin ? this.config.adminScope : undefined;
    const grant = new TokenGrant(scopes, client.scope, this.byScope, this.metadataUrl, adminScope);
    return {
      ...client,
      admin: adminScope !== undefined && scopes.includes(adminScope),
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
    /** The scope that makes this token an admin; absent: its client is no admin. */
    private readonly adminScope?: string,
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
    return this.insufficient(
      needed,
      `the token's scopes do not cover "${tool.name}"; sign in again with scope "${needed}"`,
      `scope ${needed} is needed for ${tool.name}`,
    );
  }

  /** The 403 for an admin route: the admin scope, where the client is an admin; else none. */
  adminStepUp(): ApiError | undefined {
    if (this.adminScope === undefined || this.scopes.includes(this.adminScope)) return undefined;
    return this.insufficient(
      this.adminScope,
      `this route is for admins: a token of an admin client needs scope "${this.adminScope}"`,
      `scope ${this.adminScope} is needed for admin routes`,
    );
  }

  private insufficient(needed: string, message: string, description: string): ApiError {
    // The scopes held plus the one missing: a client that asks for exactly this keeps its tools.
    const scope = [...new Set([...this.scopes, needed])].join(' ');
    return new ApiError('insufficient_scope', message, {
      details: { requiredScope: needed, scope },
      headers: {
        'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${quoted(scope)}", resource_metadata="${this.metadataUrl}", error_description="${quoted(description)}"`,
      },
    });
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

/**
 * What the http tools need from the worker: one SafeHttpClient built from `policy.http`,
 * reached through `ctx.services.http`.
 */
import { ToolError, type CallCredentials, type ToolContext } from '@toolgate/registry';
import {
  SafeHttpClient,
  type HttpClientOptions,
  type HttpPolicy,
  type HttpRequest,
  type HttpResult,
} from './safe-http-client.js';

/** The `http` field of ToolServices. */
export interface HttpToolServices {
  readonly policy: Readonly<HttpPolicy>;
  /** `credentials`: the call's rules, whose headers go to the hosts they name. */
  request(
    request: HttpRequest,
    signal?: AbortSignal,
    credentials?: CallCredentials,
  ): Promise<HttpResult>;
}

declare module '@toolgate/registry' {
  interface ToolServices {
    http: HttpToolServices;
  }
}

/**
 * Builds `ctx.services.http` from `config.policy.http`. Throws InvalidAllowHostError when an
 * allowHosts entry cannot be parsed, so a bad config stops the worker at start-up.
 */
export function createHttpServices(
  policy: HttpPolicy,
  options: HttpClientOptions = {},
): HttpToolServices {
  return new SafeHttpClient(policy, options);
}

export function httpServices(ctx: ToolContext): HttpToolServices {
  const { http } = ctx.services as Partial<ToolContext['services']>;
  if (!http) throw new ToolError('tool_unavailable', 'this worker has no HTTP policy configured');
  return http;
}

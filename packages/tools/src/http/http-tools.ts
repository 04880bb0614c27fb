/** http_get and http_post (docs/spec.md §4): fetch a public URL under the §6 SSRF rules. */
import { Type, defineTool } from '@toolgate/registry';
import { httpServices } from './services.js';
import type { HttpResult } from './safe-http-client.js';

/** Longest request body http_post sends. */
export const MAX_POST_BODY_CHARS = 1_000_000;
/**
 * The worker's hard stop. policy.http.timeoutMs (default 10 s) caps each request well before
 * this; a policy timeout above it is cut here.
 */
export const HTTP_TOOL_TIMEOUT_MS = 60_000;

const url = Type.String({
  minLength: 1,
  maxLength: 8192,
  description: 'Absolute http:// or https:// URL of a public host',
});
const headers = Type.Optional(
  Type.Record(
    Type.String({ pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$" }),
    Type.String({ maxLength: 8192 }),
    {
      maxProperties: 64,
      description:
        'Extra request headers, e.g. {"Accept": "application/json"}. Host, Connection and other ' +
        'hop-by-hop headers are ignored; Authorization and Cookie are not sent on to another origin after a redirect.',
    },
  ),
);

/** HttpResult as a schema: every field always present, nothing else. */
export const HttpResultSchema = Type.Object(
  {
    status: Type.Integer({ minimum: 100, maximum: 999, description: 'HTTP status code' }),
    statusText: Type.String({ description: 'Reason phrase (may be empty)' }),
    url: Type.String({ description: 'The final URL, after redirects' }),
    headers: Type.Record(Type.String({ pattern: "^[!#$%&'*+.^_`|~0-9a-z-]+$" }), Type.String(), {
      additionalProperties: false,
      description: 'A safe subset of the response headers, names in lower case',
    }),
    body: Type.String({ description: 'Text, or base64 when encoding is "base64"' }),
    encoding: Type.Union([Type.Literal('utf-8'), Type.Literal('base64')]),
    truncated: Type.Boolean({ description: 'The body was cut at the size limit' }),
    bytes: Type.Integer({ minimum: 0, description: 'Bytes of body received' }),
    redirects: Type.Integer({ minimum: 0, description: 'Redirects followed' }),
  },
  { additionalProperties: false },
);

const RESULT_DOC =
  'Returns {status, statusText, url (final, after redirects), headers (a safe subset), body, ' +
  'encoding ("utf-8", or "base64" for binary), truncated (body cut at the size limit), bytes, redirects}. ' +
  'A non-2xx status is a normal result. Only public internet hosts are reachable; private, ' +
  'loopback and cloud-metadata addresses are refused with error blocked_address.';

export const httpGet = defineTool({
  name: 'http_get',
  description: `Fetch a URL with HTTP GET and return the response. ${RESULT_DOC}`,
  category: 'web',
  parameters: Type.Object({ url, headers }),
  result: HttpResultSchema,
  risk: 'safe',
  timeoutMs: HTTP_TOOL_TIMEOUT_MS,
  cacheTtlSeconds: 300,
  idempotent: true,
  handler: (args, ctx): Promise<HttpResult> =>
    httpServices(ctx).request(
      { method: 'GET', url: args.url, ...(args.headers ? { headers: args.headers } : {}) },
      ctx.signal,
      ctx.credentials,
    ),
});

export const httpPost = defineTool({
  name: 'http_post',
  description:
    'Send an HTTP POST with a text body (JSON is sent as application/json unless a Content-Type ' +
    `header says otherwise) and return the response. Redirects 301/302/303 continue as GET. ${RESULT_DOC}`,
  category: 'web',
  parameters: Type.Object({
    url,
    body: Type.String({
      maxLength: MAX_POST_BODY_CHARS,
      description: 'Request body, e.g. a JSON string',
    }),
    headers,
  }),
  result: HttpResultSchema,
  risk: 'sensitive',
  timeoutMs: HTTP_TOOL_TIMEOUT_MS,
  idempotent: false,
  handler: (args, ctx): Promise<HttpResult> =>
    httpServices(ctx).request(
      {
        method: 'POST',
        url: args.url,
        body: args.body,
        ...(args.headers ? { headers: args.headers } : {}),
      },
      ctx.signal,
      ctx.credentials,
    ),
});

/** The http tools (docs/spec.md §4) and the SSRF guard behind them (docs/spec.md §6). */
import type { AnyToolSpec } from '@toolgate/registry';
import { httpGet, httpPost } from './http-tools.js';
import './services.js';

export const httpTools: AnyToolSpec[] = [httpGet, httpPost];

export { httpGet, httpPost, HTTP_TOOL_TIMEOUT_MS, MAX_POST_BODY_CHARS } from './http-tools.js';
export { createHttpServices, httpServices } from './services.js';
export { startEgressProxy } from './egress-proxy.js';
export { EgressCa } from './egress-ca.js';
export { SafeHttpClient, DEFAULT_USER_AGENT } from './safe-http-client.js';
export { createGuardedFetch } from './guarded-fetch.js';
export type { GuardedFetch, GuardedRequestInit, GuardedResponse } from './guarded-fetch.js';
export { AddressGuard, parseHttpUrl, pinnedLookup, systemLookup } from './address-guard.js';
export { AllowHosts, InvalidAllowHostError } from './allow-hosts.js';
export {
  classifyAddress,
  CLOUD_METADATA_ADDRESSES,
  CLOUD_METADATA_HOSTS,
} from './address-ranges.js';

export type { HttpToolServices } from './services.js';
export type { EgressMeter, EgressProxy, EgressProxyOptions } from './egress-proxy.js';
export type { HttpPolicy, HttpRequest, HttpResult, HttpClientOptions } from './safe-http-client.js';
export type {
  AddressPolicy,
  CheckedTarget,
  LookupFunction,
  ResolvedAddress,
} from './address-guard.js';
export type { AddressClass, AddressRange } from './address-ranges.js';

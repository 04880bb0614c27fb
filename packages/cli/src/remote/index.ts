/**
 * What the commands that talk to a running gateway share: which gateway and key (flags, env,
 * profile), its HTTP API and SSE streams, and how answers print (-o table|json|yaml).
 */
export { DEFAULT_GATEWAY, GATEWAY_HELP, GATEWAY_OPTIONS, gatewayOf } from './gateway.js';
export type { Gateway } from './gateway.js';
export { api, apiErrorText, apiOk, ok, unreachable } from './api.js';
export type { ApiAnswer } from './api.js';
export { sse } from './sse.js';
export type { SseEvent, SseOptions } from './sse.js';
export { follower, outputFormat, render, renderOne } from './output.js';
export type { Colours, Column, Follower, OutputFormat } from './output.js';
export { profilePath, readProfile, removeProfile, writeProfile } from './profile.js';
export type { Profile } from './profile.js';
export { interrupt } from './interrupt.js';
export type { Interrupt } from './interrupt.js';

export { createGateway } from './gateway.js';
export { ApiError } from './errors.js';
export type { Gateway, GatewayOptions } from './gateway.js';
export type { ApiErrorCode } from './errors.js';

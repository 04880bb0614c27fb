/**
 * Preload for tracing: `node --import @toolgate/telemetry/register main.js`. Registers the
 * ESM hook so express, ioredis and http are instrumented even when imported as ES modules,
 * then starts the SDK from OTEL_* variables (does nothing when none are set).
 */
import { register } from 'node:module';
import { startTelemetry, telemetryWanted } from './index.js';

if (telemetryWanted(process.env)) {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);
  const serviceName = process.env.OTEL_SERVICE_NAME ?? 'toolgate';
  startTelemetry({ serviceName });
  // Services flush with shutdownTelemetry() before they exit.
}

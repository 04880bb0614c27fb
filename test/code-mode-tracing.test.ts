/** A code-mode script's nested calls are child spans of the script's trace (docs/code-mode.md). */
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { startTelemetry } from '@toolgate/telemetry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { startCodeModeStack as Start } from './support/code-mode-stack.js';
import { executeSpan } from './support/spans.js';

const exporter = new InMemorySpanExporter();
const telemetry = startTelemetry({
  serviceName: 'toolgate-test',
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});

// Loaded after the SDK starts, as the services' --import preload does.
const { startCodeModeStack, whyNoCodeMode } = await import('./support/code-mode-stack.js');
const reason = await whyNoCodeMode();
if (reason) console.warn(`code-mode tracing: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('code-mode tracing', () => {
  let started: Awaited<ReturnType<typeof Start>>;
  beforeAll(async () => {
    started = await startCodeModeStack();
  }, 120_000);
  afterAll(async () => {
    await started?.close();
    await telemetry.shutdown();
  });

  it("a nested call's gateway and worker spans are in the script's trace, under its execute span", async () => {
    const res = await started.stack.call('/tools/run_code_with_tools/execute', {
      json: { code: 'print(toolgate.calculator(expression="6*7"))' },
    });
    const script = (await res.json()) as { id: string; result: { stdout: string } };
    expect(script.result.stdout).toBe('42\n');
    const execute = await executeSpan(exporter, script.id);
    const spans = exporter.getFinishedSpans();
    const traceId = execute.spanContext().traceId;
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const childCall = inTrace.find(
      (s) => s.name === 'toolgate.call' && s.attributes['toolgate.tool'] === 'calculator',
    );
    const childExecute = inTrace.find(
      (s) => s.name === 'toolgate.execute' && s.attributes['toolgate.tool'] === 'calculator',
    );
    expect(childCall, 'the nested call on the gateway').toBeDefined();
    expect(childExecute, 'the nested call on the worker').toBeDefined();
    expect(childExecute!.parentSpanContext?.spanId).toBe(childCall!.spanContext().spanId);
    // The nested call's chain leads back to the script's execute span.
    const byId = new Map(inTrace.map((s) => [s.spanContext().spanId, s]));
    let up = childCall;
    while (up && up !== execute) up = byId.get(up.parentSpanContext?.spanId ?? '');
    expect(up).toBe(execute);
  });
});

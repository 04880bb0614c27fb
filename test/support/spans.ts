/** Finished spans, for the tracing tests. */
import type { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { vi } from 'vitest';

type FinishedSpan = ReturnType<InMemorySpanExporter['getFinishedSpans']>[number];

/**
 * The worker's `toolgate.execute` span of call `id`. The worker ends it just after the answer,
 * so it is looked for until it is there (for up to 5 s).
 */
export function executeSpan(exporter: InMemorySpanExporter, id: string): Promise<FinishedSpan> {
  return vi.waitFor(() => {
    const span = exporter
      .getFinishedSpans()
      .find((s) => s.name === 'toolgate.execute' && s.attributes['toolgate.call_id'] === id);
    if (!span) throw new Error(`no toolgate.execute span for ${id} yet`);
    return span;
  }, 5000);
}

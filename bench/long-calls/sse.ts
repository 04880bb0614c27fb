// Reads a call's Server-Sent Events stream (`GET /v1/calls/{id}/events`) for the long-calls
// bench, stamping each event with the wall-clock time it arrived here.

export interface SseEvent {
  event: string;
  id?: string;
  data: Record<string, unknown>;
  /** Arrival, ms since the epoch with sub-millisecond precision (comparable with `date +%s%N`). */
  at: number;
}

/** Wall-clock now in ms with the monotonic clock's resolution (Date.now() has whole ms only). */
export const nowMs = (): number => performance.timeOrigin + performance.now();

/** Reads the stream to its end (the gateway ends it after `outcome`). */
export async function readEvents(
  res: Response,
  onEvent?: (e: SseEvent) => void,
): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    // One stamp per network read: events that came in the same read arrived together.
    const at = nowMs();
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields: Record<string, string> = {};
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue; // keep-alive comment
        const colon = line.indexOf(': ');
        if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 2);
      }
      if (!fields.event) continue;
      const event: SseEvent = {
        event: fields.event,
        data: JSON.parse(fields.data ?? '{}') as Record<string, unknown>,
        at,
        ...(fields.id ? { id: fields.id } : {}),
      };
      events.push(event);
      onEvent?.(event);
    }
  }
  return events;
}

/**
 * Server-Sent Events over fetch: EventSource cannot send an Authorization header, and the key
 * must never go into a URL, so the console reads the stream itself.
 */
export interface SseMessage {
  event: string;
  data: string;
  id?: string;
}

/** Splits an event-stream text into messages; returns them and the unfinished tail. */
export function parseSse(buffer: string): { messages: SseMessage[]; rest: string } {
  const messages: SseMessage[] = [];
  const text = buffer.replace(/\r\n?/g, '\n');
  let start = 0;
  let end: number;
  while ((end = text.indexOf('\n\n', start)) >= 0) {
    const block = text.slice(start, end);
    start = end + 2;
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue; // comments keep proxies awake
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') id = value;
    }
    if (data.length > 0) messages.push({ event, data: data.join('\n'), ...(id ? { id } : {}) });
  }
  return { messages, rest: text.slice(start) };
}

/** Reads an SSE response body to its end, handing each message to `onMessage`. */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  onMessage: (m: SseMessage) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    const { messages, rest } = parseSse(buffer);
    buffer = rest;
    for (const m of messages) onMessage(m);
  }
}

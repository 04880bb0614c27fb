import { Type, ToolError, defineTool } from '@toolgate/registry';

/** "+05:30" for the zone's offset at `date`. */
function offsetOf(date: Date, timeZone: string): string {
  const name = new Intl.DateTimeFormat('en-US', { timeZone, timeZoneName: 'longOffset' })
    .formatToParts(date)
    .find((p) => p.type === 'timeZoneName')?.value;
  const m = /GMT([+-]\d{2}):?(\d{2})?/.exec(name ?? '');
  return m ? `${m[1]}:${m[2] ?? '00'}` : '+00:00';
}

export function isoInZone(date: Date, timeZone: string): string {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-CA', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    })
      .formatToParts(date)
      .map((p) => [p.type, p.value]),
  );
  const ms = String(date.getUTCMilliseconds()).padStart(3, '0');
  const offset = offsetOf(date, timeZone);
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}.${ms}${offset === '+00:00' && timeZone === 'UTC' ? 'Z' : offset}`;
}

export const CurrentTimeResult = Type.Object(
  {
    iso: Type.String({
      format: 'date-time',
      description: 'ISO 8601 in the zone, with its offset ("Z" for UTC)',
    }),
    timezone: Type.String({ description: 'The IANA zone used' }),
    unixMs: Type.Integer({ description: 'Milliseconds since 1970-01-01T00:00:00Z' }),
  },
  { additionalProperties: false },
);

export const currentTime = defineTool({
  name: 'current_time',
  description:
    'The current date and time in ISO 8601, in an IANA time zone such as "Europe/Paris" (default UTC).',
  category: 'time',
  parameters: Type.Object({
    timezone: Type.Optional(
      Type.String({ minLength: 1, maxLength: 64, description: 'IANA zone, default "UTC"' }),
    ),
  }),
  result: CurrentTimeResult,
  timeoutMs: 1000,
  idempotent: true,
  handler: ({ timezone }) => {
    const zone = timezone ?? 'UTC';
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: zone });
    } catch {
      throw new ToolError(
        'invalid_timezone',
        `unknown time zone "${zone}"; use an IANA name such as "America/New_York"`,
      );
    }
    const now = new Date();
    return { iso: isoInZone(now, zone), timezone: zone, unixMs: now.getTime() };
  },
});

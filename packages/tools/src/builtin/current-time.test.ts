import { describe, expect, it } from 'vitest';
import { currentTime, isoInZone } from './current-time.js';

const ctx = { callId: 'c', clientId: 'x', signal: new AbortController().signal, services: {} };

describe('current_time', () => {
  it('formats ISO 8601 with the zone offset', () => {
    const date = new Date('2026-07-01T12:34:56.789Z');
    expect(isoInZone(date, 'UTC')).toBe('2026-07-01T12:34:56.789Z');
    expect(isoInZone(date, 'Europe/Paris')).toBe('2026-07-01T14:34:56.789+02:00');
    expect(isoInZone(date, 'Asia/Kolkata')).toBe('2026-07-01T18:04:56.789+05:30');
    expect(isoInZone(date, 'America/New_York')).toBe('2026-07-01T08:34:56.789-04:00');
  });

  it('answers now in the requested zone', async () => {
    const before = Date.now();
    const out = (await currentTime.handler({ timezone: 'Asia/Tokyo' }, ctx)) as {
      iso: string;
      unixMs: number;
      timezone: string;
    };
    expect(out.timezone).toBe('Asia/Tokyo');
    expect(out.iso).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}\+09:00$/);
    expect(Math.abs(Date.parse(out.iso) - out.unixMs)).toBeLessThan(1000);
    expect(out.unixMs).toBeGreaterThanOrEqual(before);
  });

  it('rejects unknown zones with invalid_timezone', async () => {
    await expect(
      Promise.resolve().then(() => currentTime.handler({ timezone: 'Mars/Olympus' }, ctx)),
    ).rejects.toMatchObject({
      code: 'invalid_timezone',
    });
  });
});

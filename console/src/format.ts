import type { CallStatus } from '@toolgate/gateway';

export const FINAL: ReadonlySet<CallStatus> = new Set([
  'ok',
  'error',
  'cancelled',
  'rejected',
  'expired',
]);

export const STATUSES: CallStatus[] = [
  'queued',
  'running',
  'pending_approval',
  'ok',
  'error',
  'cancelled',
  'rejected',
  'expired',
];

/** "3 s", "4 min", "2 h": how long ago, or how long until, an ISO time. */
export function span(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export const ago = (iso: string, now = Date.now()) => `${span(now - Date.parse(iso))} ago`;

export function duration(ms: number | undefined): string {
  if (ms === undefined) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

export const time = (iso: string) => new Date(iso).toLocaleTimeString();

export const json = (v: unknown) => JSON.stringify(v, null, 2) ?? 'undefined';

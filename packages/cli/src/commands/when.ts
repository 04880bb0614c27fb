/** How times, durations and sizes read in the tables of the commands that talk to a gateway. */

/** "4s", "3m", "2h", "5d": the largest whole unit, like `kubectl get`'s AGE. */
export function span(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172_800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

/** "4s ago" for a past time, "in 3m" for a future one (an expiry). */
export function age(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  return t <= now ? `${span(now - t)} ago` : `in ${span(t - now)}`;
}

/** "850 ms", "2.31 s"; '' when unknown. */
export function duration(ms: number | undefined): string {
  if (ms === undefined) return '';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** "12.3 MiB"; '' when unknown. */
export function bytes(n: number | undefined): string {
  if (n === undefined) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

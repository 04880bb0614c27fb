import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import type { CallOutcome } from './types.js';
import { Upkeep } from './upkeep.js';

/** Upper bounds (ms) of the latency buckets; the last bucket is everything slower. */
export const LATENCY_BUCKETS_MS = [
  5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000,
];
/** Minutes a point is kept: the console shows the last hour. */
const KEEP_SECONDS = 2 * 3600;
/** How often a process sends a minute key's expiry again while it writes to it. */
const EXPIRE_EVERY_MS = 30_000;

export interface Gauges {
  queueFast: number;
  queueSandbox: number;
  workers: number;
  warm: number;
}

export interface SeriesPoints {
  from: number;
  points: number;
  tools: Record<string, { calls: number[]; errors: number[]; p95Ms: (number | null)[] }>;
  queue: { fast: (number | null)[]; sandbox: (number | null)[] };
  workers: (number | null)[];
  warm: (number | null)[];
  /** One user's calls and errors per minute (`read` with a client and a user). */
  user?: { id: string; calls: number[]; errors: number[] };
}

const minuteOf = (ms: number) => Math.floor(ms / 60_000);

/**
 * The console's time series (`GET /v1/series`): one Redis hash per minute holding, per tool,
 * calls, errors and a latency histogram (fixed buckets, so any p95 is read from counts), and
 * gauges a gateway samples once a minute. Bounded by design: tools × buckets fields a minute,
 * two hours kept. Prometheus stays the source for Grafana; this is the console's own view.
 */
export class Series {
  private readonly expiries = new Upkeep(EXPIRE_EVERY_MS);

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /**
   * Counts finished calls into the current minute, everyone's and each client's own (a client
   * sees only its own calls), with the stats in the same round trip.
   */
  addTo(
    multi: ChainableCommander,
    calls: readonly { outcome: CallOutcome; clientId: string; user?: string }[],
    at = Date.now(),
  ): void {
    if (calls.length === 0) return;
    const minute = minuteOf(at);
    const counts = new Map<string, Map<string, number>>();
    const add = (key: string, field: string) => {
      let fields = counts.get(key);
      if (!fields) counts.set(key, (fields = new Map()));
      fields.set(field, (fields.get(field) ?? 0) + 1);
    };
    for (const { outcome: o, clientId, user } of calls) {
      for (const key of [this.keys.series(minute), this.keys.series(minute, clientId)]) {
        add(key, `c:${o.tool}`);
        if (o.status === 'error') add(key, `e:${o.tool}`);
        add(key, `h:${o.tool}:${bucketOf(o.durationMs)}`);
      }
      // Per user only calls and errors: a user's fields a minute are two, whatever its tools.
      if (user !== undefined) {
        const key = this.keys.userSeries(minute, clientId);
        add(key, `c:${user}`);
        if (o.status === 'error') add(key, `e:${user}`);
      }
    }
    for (const [key, fields] of counts) {
      for (const [field, n] of fields) multi.hincrby(key, field, n);
      // A minute's key is written for a minute: its expiry once per process (and again after
      // EXPIRE_EVERY_MS, should the key have been lost and written anew meanwhile).
      if (this.expiries.due(key)) multi.expire(key, KEEP_SECONDS);
    }
  }

  /** Records the gauges for the current minute (any gateway; the last sample wins). */
  async sample(gauges: Gauges, at = Date.now()): Promise<void> {
    const key = this.keys.series(minuteOf(at));
    await this.redis
      .multi()
      .hset(key, {
        'g:qf': gauges.queueFast,
        'g:qs': gauges.queueSandbox,
        'g:w': gauges.workers,
        'g:warm': gauges.warm,
      })
      .expire(key, KEEP_SECONDS)
      .exec();
  }

  /** The last `minutes` minutes (the current one last), for the tools `visible` allows. */
  async read(
    minutes: number,
    visible: (tool: string) => boolean,
    /** One client's calls; everyone's (and the gauges) without it. */
    clientId?: string,
    now = Date.now(),
    /** With `clientId`: also this user's calls and errors (`user`). */
    user?: string,
  ): Promise<SeriesPoints> {
    const last = minuteOf(now);
    const first = last - minutes + 1;
    const multi = this.redis.multi();
    for (let m = first; m <= last; m++) multi.hgetall(this.keys.series(m, clientId));
    const perUser = clientId !== undefined && user !== undefined;
    if (perUser)
      for (let m = first; m <= last; m++)
        multi.hmget(this.keys.userSeries(m, clientId), `c:${user}`, `e:${user}`);
    const replies = ((await multi.exec()) ?? []).map(([err, h]) => {
      if (err) throw err;
      return h;
    });
    const hashes = replies.slice(0, minutes) as Record<string, string>[];
    const out: SeriesPoints = {
      from: first * 60_000,
      points: minutes,
      tools: {},
      queue: { fast: [], sandbox: [] },
      workers: [],
      warm: [],
    };
    const gauge = (h: Record<string, string>, f: string) =>
      h[f] === undefined ? null : Number(h[f]);
    hashes.forEach((h, i) => {
      out.queue.fast.push(gauge(h, 'g:qf'));
      out.queue.sandbox.push(gauge(h, 'g:qs'));
      out.workers.push(gauge(h, 'g:w'));
      out.warm.push(gauge(h, 'g:warm'));
      const histograms = new Map<string, number[]>();
      for (const [field, value] of Object.entries(h)) {
        const [kind, ...rest] = field.split(':');
        if (kind !== 'c' && kind !== 'e' && kind !== 'h') continue;
        const bucket = kind === 'h' ? Number(rest.pop()) : 0;
        const tool = rest.join(':');
        if (!visible(tool)) continue;
        const t = (out.tools[tool] ??= {
          calls: new Array<number>(minutes).fill(0),
          errors: new Array<number>(minutes).fill(0),
          p95Ms: new Array<number | null>(minutes).fill(null),
        });
        if (kind === 'c') t.calls[i] = Number(value);
        else if (kind === 'e') t.errors[i] = Number(value);
        else {
          let counts = histograms.get(tool);
          if (!counts)
            histograms.set(
              tool,
              (counts = new Array<number>(LATENCY_BUCKETS_MS.length + 1).fill(0)),
            );
          counts[bucket] = Number(value);
        }
      }
      for (const [tool, counts] of histograms) out.tools[tool]!.p95Ms[i] = p95(counts);
    });
    if (perUser) {
      const rows = replies.slice(minutes) as (string | null)[][];
      out.user = {
        id: user,
        calls: rows.map(([c]) => Number(c ?? 0)),
        errors: rows.map(([, e]) => Number(e ?? 0)),
      };
    }
    return out;
  }
}

function bucketOf(ms: number): number {
  const i = LATENCY_BUCKETS_MS.findIndex((upper) => ms <= upper);
  return i < 0 ? LATENCY_BUCKETS_MS.length : i;
}

/** The upper bound of the bucket holding the 95th percentile (the slowest bound for the last). */
function p95(counts: number[]): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= Math.ceil(total * 0.95))
      return LATENCY_BUCKETS_MS[Math.min(i, LATENCY_BUCKETS_MS.length - 1)]!;
  }
  return LATENCY_BUCKETS_MS.at(-1)!;
}

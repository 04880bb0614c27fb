/**
 * Moves Sentinel-managed connections to a new master as soon as the sentinels announce it
 * (`+switch-master`), in place of ioredis's own `failoverDetector`. That one, when the
 * announcement arrives while its connection is reconnecting — the usual case: the old master
 * has just died — cancels the reconnect for good (ioredis 5.11: the sentinel lookup in flight
 * throws "Connection is closed", the connection ends and never comes back; seen in
 * test/redis-ha/sentinel.test.ts as a gateway answering 503 for good). Here only a connection
 * that is up, and not to the new master, is told to reconnect; one that is reconnecting asks
 * the sentinels anyway. One subscriber per sentinel per process, shared by its connections.
 */
import { Redis, type RedisOptions } from 'ioredis';

interface Watch {
  name: string;
  clients: Set<Redis>;
  subscribers: Redis[];
}

const watches = new Map<string, Watch>();

/**
 * Follows the failovers of master `name` for `client` until it ends.
 * @param options how to reach the sentinels (password, TLS).
 */
export function followFailovers(
  client: Redis,
  sentinels: readonly { host: string; port: number }[],
  name: string,
  options: RedisOptions,
): void {
  const key = `${name}@${sentinels.map((s) => `${s.host}:${s.port}`).join(',')}`;
  let watch = watches.get(key);
  if (!watch) {
    const w: Watch = { name, clients: new Set(), subscribers: [] };
    w.subscribers = sentinels.map(({ host, port }) => {
      const subscriber = new Redis({
        ...options,
        host,
        port,
        enableReadyCheck: false,
        maxRetriesPerRequest: null,
        retryStrategy: (times) => Math.min(times * 200, 2000),
      });
      subscriber.on('error', () => undefined);
      subscriber.on('message', (_channel: string, message: string) => switched(w, message));
      // Resubscribed by ioredis after each reconnect.
      subscriber.subscribe('+switch-master').catch(() => undefined);
      return subscriber;
    });
    watches.set(key, (watch = w));
  }
  const w = watch;
  w.clients.add(client);
  client.once('end', () => {
    w.clients.delete(client);
    if (w.clients.size > 0) return;
    for (const subscriber of w.subscribers) subscriber.disconnect();
    watches.delete(key);
  });
}

/** `+switch-master`: `<name> <old ip> <old port> <new ip> <new port>`. */
function switched(watch: Watch, message: string): void {
  const [name, , , ip, port] = message.split(' ');
  if (name !== watch.name) return;
  for (const client of watch.clients) {
    if (client.status !== 'ready') continue;
    const at = client.stream;
    const onNew =
      String(at.remotePort) === port && at.remoteAddress?.replace(/^::ffff:/, '') === ip;
    if (!onNew) client.disconnect(true);
  }
}

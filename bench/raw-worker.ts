// The baseline's worker: a bare BullMQ Worker doing the same arithmetic, nothing else.
import { evaluate } from '@toolgate/tools';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';

const connection = new Redis(process.env.REDIS_URL!, { maxRetriesPerRequest: null });
const worker = new Worker(
  'raw-bench',
  async (job) => evaluate((job.data as { expression: string }).expression),
  {
    connection,
    concurrency: Number(process.env.CONCURRENCY ?? 32),
  },
);
await worker.waitUntilReady();
console.log('raw worker ready');
process.on('SIGTERM', () => void worker.close().then(() => process.exit(0)));

/**
 * `npx tsx --conditions=@toolgate/source bench/sandbox/run.ts [--samples N] [--seconds S] [--concurrency C] [--json]`
 * Prints the sandbox ratios (docs/spec.md §9); exits non-zero only when the bench itself fails.
 */
import { parseArgs } from 'node:util';
import { formatReport, runSandboxBench } from './sandbox-bench.js';

const { values } = parseArgs({
  options: {
    samples: { type: 'string', default: '15' },
    seconds: { type: 'string', default: '30' },
    concurrency: { type: 'string', default: '8' },
    json: { type: 'boolean', default: false },
  },
});

const report = await runSandboxBench({
  samples: Number(values.samples),
  sustainSeconds: Number(values.seconds),
  concurrency: Number(values.concurrency),
  log: (line) => process.stderr.write(`[bench:sandbox] ${line}\n`),
});
process.stdout.write(
  values.json ? JSON.stringify(report, null, 2) + '\n' : formatReport(report) + '\n',
);

/** The worker's sandbox metrics, fed as the docker driver feeds them (its onRun hook). */
import type { RunResult } from '@toolgate/sandbox';
import { describe, expect, it } from 'vitest';
import { createMetrics } from './metrics.js';

describe('worker sandbox metrics', () => {
  it('shows where each docker run went, phase by phase', async () => {
    const metrics = createMetrics();
    const result: RunResult = {
      stdout: 'hello world\n',
      stderr: '',
      exitCode: 0,
      timedOut: false,
      truncated: false,
      outputLimited: false,
      oomKilled: false,
      durationMs: 16,
      driver: 'docker',
      warm: true,
    };
    metrics.sandboxHooks().onRun?.({
      image: 'python',
      driver: 'docker',
      warm: true,
      durationMs: 16,
      result,
      phases: { startedAt: 0, checkoutMs: 0.1, mountMs: 3, execMs: 12, collectMs: 0.2 },
    });
    const text = await metrics.registry.metrics();
    for (const [phase, le] of [
      ['checkout', '0.0005'],
      ['mount', '0.005'],
      ['exec', '0.025'],
      ['collect', '0.0005'],
    ])
      expect(text).toContain(
        `toolgate_sandbox_phase_seconds_bucket{le="${le}",service="worker",image="python",phase="${phase}"} 1`,
      );
  });
});

import { defineConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources (no build step for tests).
const conditions = ['@toolgate/source', 'module', 'node', 'development|production'];

/**
 * The integration tests that run a second time against a real Redis Cluster (3 masters with a
 * replica each, started by test/support/global-setup.ts): calls, idempotency, approvals, rate
 * limits, the cache, stats, fairness, tenant data, MCP and refusals. They use test/support/stack.ts only, so the
 * same files run on both.
 */
export const CLUSTER_SUITE = [
  'test/gateway.test.ts',
  'test/policy.test.ts',
  'test/tenant-data.test.ts',
  'test/fairness.test.ts',
  'test/console-api.test.ts',
  'test/mcp.test.ts',
  'test/refusals.test.ts',
  'test/noisy-policy.test.ts',
  'test/redis-ha/cluster.test.ts',
];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    exclude: ['**/node_modules/**', '**/dist/**'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: [
            'packages/*/src/**/*.test.ts',
            'services/*/src/**/*.test.ts',
            'console/src/**/*.test.ts',
            'test/**/*.test.ts',
          ],
          exclude: ['**/node_modules/**', '**/dist/**', 'test/redis-ha/cluster.test.ts'],
          typecheck: {
            enabled: true,
            include: ['test/**/*.test-d.ts'],
            tsconfig: 'test/tsconfig.sdk-types.json',
          },
        },
      },
      { extends: true, test: { name: 'cluster', include: CLUSTER_SUITE } },
    ],
  },
});

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// The examples' tool loops against a real toolgate (gateway + worker in process, the test
// Redis of test/support) and fake model servers on loopback: no model, no network.
const root = fileURLToPath(new URL('..', import.meta.url));
const conditions = ['@toolgate/source', 'module', 'node', 'development|production'];

export default defineConfig({
  root,
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    include: ['examples/test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

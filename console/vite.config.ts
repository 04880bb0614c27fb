import { defineConfig } from 'vite';

// The gateway serves dist/ at /console/ under a strict CSP (script-src 'self', style-src
// 'self'): everything must be a file of its own, nothing inline.
export default defineConfig({
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // The polyfill would be inlined into the entry; every browser the console targets has
    // modulepreload.
    modulePreload: { polyfill: false },
    // Never turn a small asset into a data: URL inside the CSS or JS (img-src allows data:,
    // but font-src does not).
    assetsInlineLimit: 0,
  },
  server: {
    // `pnpm dev`: the API lives on the gateway (TOOLGATE_URL, default the local one).
    proxy: Object.fromEntries(
      ['/v1', '/tools'].map((p) => [p, process.env.TOOLGATE_URL ?? 'http://127.0.0.1:8080']),
    ),
  },
});

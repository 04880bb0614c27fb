// node --test plugins/examples/stock_quote/plugin.test.mjs — against a local quote server.
/* global URL, AbortSignal -- Node's globals (the lint config declares none for JS) */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import plugin from './plugin.mjs';

class ToolError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'ToolError';
    this.code = code;
  }
}
const logger = { debug() {}, info() {}, warn() {}, error() {} };
const ctx = () => ({
  callId: 't',
  clientId: 't',
  signal: AbortSignal.timeout(10_000),
  services: {},
});

const QUOTES = {
  AAPL: { c: 189.5, d: 1.25, dp: 0.664, h: 190.1, l: 187.2, o: 188, pc: 188.25, t: 1767196800 },
};
let server;
let base;
const seen = [];

before(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    seen.push(url);
    const symbol = url.searchParams.get('symbol');
    if (url.searchParams.get('token') !== 'secret-token') return res.writeHead(401).end();
    if (symbol === 'DOWN') return res.writeHead(502).end();
    if (symbol === 'SLOW') return; // never answers
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify(QUOTES[symbol] ?? { c: 0, d: null, dp: null, h: 0, l: 0, o: 0, pc: 0, t: 0 }),
    );
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}/quote?symbol={symbol}&token={token}`;
});
after(() => server.closeAllConnections() || server.close());

const load = (env) => plugin({ env, logger, ToolError, dir: import.meta.dirname });

test('declares a 60 s cacheable tool', () => {
  const [tool] = load({ STOCK_QUOTE_URL: base, STOCK_QUOTE_TOKEN: 't' }).tools;
  assert.equal(tool.name, 'stock_quote');
  assert.equal(tool.cacheTtlSeconds, 60);
});

test('answers a quote from the configured upstream', async () => {
  const [tool] = load({ STOCK_QUOTE_URL: base, STOCK_QUOTE_TOKEN: 'secret-token' }).tools;
  const quote = await tool.handler({ symbol: 'aapl' }, ctx());
  assert.deepEqual(quote, {
    symbol: 'AAPL',
    price: 189.5,
    change: 1.25,
    changePercent: 0.664,
    open: 188,
    high: 190.1,
    low: 187.2,
    previousClose: 188.25,
    time: '2025-12-31T16:00:00.000Z',
  });
  assert.equal(seen.at(-1).searchParams.get('symbol'), 'AAPL');
});

test('readable errors, never the token', async () => {
  const [tool] = load({ STOCK_QUOTE_URL: base, STOCK_QUOTE_TOKEN: 'secret-token' }).tools;
  await assert.rejects(tool.handler({ symbol: 'NOPE' }, ctx()), { code: 'unknown_symbol' });
  await assert.rejects(tool.handler({ symbol: 'DOWN' }, ctx()), {
    code: 'upstream_error',
    message: /HTTP 502/,
  });
  const [wrongKey] = load({ STOCK_QUOTE_URL: base, STOCK_QUOTE_TOKEN: 'wrong' }).tools;
  await assert.rejects(wrongKey.handler({ symbol: 'AAPL' }, ctx()), (err) => {
    assert.equal(err.code, 'upstream_auth');
    assert.ok(!err.message.includes('wrong'));
    return true;
  });
});

test('refuses to load without a usable upstream', () => {
  assert.throws(() => load({}), /STOCK_QUOTE_TOKEN/);
  assert.throws(() => load({ STOCK_QUOTE_URL: 'http://127.0.0.1/quote' }), /\{symbol\}/);
});

// stock_quote: the latest price of a stock from an external quote API, cached for 60 s.
//
// Upstream: STOCK_QUOTE_URL, a URL template with {symbol} (and optionally {token}, filled from
// STOCK_QUOTE_TOKEN). Default: Finnhub's quote endpoint, which needs a free API token:
//   https://finnhub.io/api/v1/quote?symbol={symbol}&token={token}
// The answer must be Finnhub-shaped JSON: { c, d, dp, h, l, o, pc, t } (current, change,
// change %, high, low, open, previous close, unix time). Any service answering that shape works.
//
// The upstream is chosen by the operator, not the model: the model only picks a symbol, which
// the schema restricts to ticker characters and the URL encodes. The token never appears in
// results or logs.
/* global URL, fetch, AbortSignal -- Node's globals (the lint config declares none for JS) */

const DEFAULT_URL = 'https://finnhub.io/api/v1/quote?symbol={symbol}&token={token}';
const UPSTREAM_TIMEOUT_MS = 5000;

export default function stockQuotePlugin({ env, ToolError, logger }) {
  const template = env.STOCK_QUOTE_URL || DEFAULT_URL;
  const token = env.STOCK_QUOTE_TOKEN ?? '';
  if (!template.includes('{symbol}')) {
    throw new Error('STOCK_QUOTE_URL must contain {symbol} where the ticker goes');
  }
  if (template.includes('{token}') && !token) {
    throw new Error(
      'set STOCK_QUOTE_TOKEN (a Finnhub API token), or STOCK_QUOTE_URL to another quote service',
    );
  }
  const upstream = new URL(template.replace(/\{(symbol|token)\}/g, 'x'));
  if (upstream.protocol !== 'https:' && upstream.protocol !== 'http:') {
    throw new Error('STOCK_QUOTE_URL must be an http or https URL');
  }
  const where = upstream.host; // for messages: never the full URL, which may hold the token

  return {
    name: 'stock_quote',
    tools: [
      {
        name: 'stock_quote',
        description:
          'Latest stock price for a ticker symbol such as "AAPL" or "MSFT": price, change, ' +
          'change percent, open, high, low, previous close and the quote time. Cached for 60 s.',
        category: 'finance',
        parameters: {
          type: 'object',
          properties: {
            symbol: {
              type: 'string',
              pattern: '^[A-Za-z0-9.^=-]{1,15}$',
              description: 'Ticker symbol, e.g. "AAPL"',
            },
          },
          required: ['symbol'],
        },
        timeoutMs: UPSTREAM_TIMEOUT_MS + 2000,
        cacheTtlSeconds: 60,
        idempotent: true,
        handler: async ({ symbol }, ctx) => {
          const ticker = symbol.toUpperCase();
          const url = template
            .replaceAll('{symbol}', encodeURIComponent(ticker))
            .replaceAll('{token}', encodeURIComponent(token));
          let res;
          try {
            res = await fetch(url, {
              headers: { accept: 'application/json' },
              redirect: 'error',
              signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(UPSTREAM_TIMEOUT_MS)]),
            });
          } catch (err) {
            const timedOut = err?.name === 'TimeoutError';
            logger.warn({ host: where, err: err?.message }, 'quote service unreachable');
            throw new ToolError(
              timedOut ? 'upstream_timeout' : 'upstream_unreachable',
              timedOut
                ? `the quote service (${where}) did not answer within ${UPSTREAM_TIMEOUT_MS / 1000} s; try again later`
                : `the quote service (${where}) cannot be reached; try again later`,
            );
          }
          if (res.status === 401 || res.status === 403) {
            throw new ToolError(
              'upstream_auth',
              `the quote service (${where}) refused toolgate's credentials`,
            );
          }
          if (res.status === 429) {
            throw new ToolError(
              'upstream_rate_limited',
              'the quote service is rate limiting us; try again in a minute',
            );
          }
          if (!res.ok) {
            throw new ToolError(
              'upstream_error',
              `the quote service (${where}) answered HTTP ${res.status}`,
            );
          }
          let q;
          try {
            q = await res.json();
          } catch {
            throw new ToolError(
              'upstream_error',
              `the quote service (${where}) answered something that is not JSON`,
            );
          }
          if (typeof q?.c !== 'number') {
            throw new ToolError(
              'upstream_error',
              `the quote service (${where}) answered JSON without a price`,
            );
          }
          // Finnhub answers zeros for a symbol it does not know.
          if (q.c === 0 && !q.t) {
            throw new ToolError(
              'unknown_symbol',
              `no quote for "${ticker}"; check the ticker symbol`,
            );
          }
          return {
            symbol: ticker,
            price: q.c,
            change: q.d ?? null,
            changePercent: q.dp ?? null,
            open: q.o ?? null,
            high: q.h ?? null,
            low: q.l ?? null,
            previousClose: q.pc ?? null,
            time: q.t ? new Date(q.t * 1000).toISOString() : null,
          };
        },
      },
    ],
  };
}

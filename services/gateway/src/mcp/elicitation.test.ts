import { describe, expect, it } from 'vitest';
import type { CallOutcome } from '@toolgate/calls';
import {
  connectUrl,
  credentialElicitation,
  declaresUrlElicitation,
  speaksUrlElicitation,
} from './elicitation.js';

describe('URL-mode elicitation for credential_missing', () => {
  it('only for 2025-11-25 or later, and only for a client that declared elicitation.url', () => {
    expect(speaksUrlElicitation('2025-11-25')).toBe(true);
    expect(speaksUrlElicitation('2026-07-28')).toBe(true);
    expect(speaksUrlElicitation('2025-06-18')).toBe(false);
    expect(speaksUrlElicitation(undefined)).toBe(false);
    expect(speaksUrlElicitation('latest')).toBe(false);
    expect(declaresUrlElicitation({ elicitation: { url: {} } })).toBe(true);
    // Form mode only (the 2025-06-18 shape, `{}`) is not URL mode.
    expect(declaresUrlElicitation({ elicitation: {} })).toBe(false);
    expect(declaresUrlElicitation({ elicitation: { form: {} } })).toBe(false);
    expect(declaresUrlElicitation(undefined)).toBe(false);
  });

  it("points at the console's Connect page for the secret, the user's own when there is one", () => {
    expect(connectUrl('https://tg.example/', 'gh token', 'carol', 'ann@x')).toBe(
      'https://tg.example/console/#/connect/carol/gh%20token/ann%40x',
    );
    const outcome = (details: unknown): CallOutcome => ({
      id: 'c1',
      tool: 'http_get',
      status: 'error',
      error: { code: 'credential_missing', message: 'm', details },
      durationMs: 1,
      cached: false,
    });
    expect(
      credentialElicitation(
        outcome({ secret: 'gh', client: 'carol', user: 'ann', host: 'api.github.com' }),
        'https://tg.example',
      ),
    ).toMatchObject({
      mode: 'url',
      elicitationId: 'c1',
      url: 'https://tg.example/console/#/connect/carol/gh/ann',
    });
    expect(credentialElicitation(outcome(undefined), 'https://tg.example')).toBeUndefined();
    expect(
      credentialElicitation(
        { ...outcome({ secret: 'gh', client: 'carol' }), status: 'ok' },
        'https://tg.example',
      ),
    ).toBeUndefined();
  });
});

import { describe, expect, it } from 'vitest';
import { budgetRemaining, budgetWindow, exhaustedBudget, type BudgetUse } from './budgets.js';

describe('budget windows (UTC)', () => {
  it('names a day and a month and ends them at the next UTC midnight / first of the month', () => {
    const now = Date.UTC(2026, 11, 31, 23, 59, 59);
    expect(budgetWindow('day', now)).toEqual({
      period: 'd20261231',
      resetsAt: Date.UTC(2027, 0, 1),
    });
    expect(budgetWindow('month', now)).toEqual({
      period: 'm202612',
      resetsAt: Date.UTC(2027, 0, 1),
    });
    expect(budgetWindow('day', Date.UTC(2028, 1, 28, 12))).toEqual({
      period: 'd20280228',
      resetsAt: Date.UTC(2028, 1, 29),
    });
  });
});

const w = (used: number, limit: number, window: 'day' | 'month', resetsAt: number) => ({
  used,
  limit,
  window,
  resetsAt,
});

describe('exhausted and remaining', () => {
  const client: BudgetUse = {
    calls: { ...w(5, 10, 'day', 1), windows: [w(5, 10, 'day', 1), w(90, 90, 'month', 2)] },
    sandboxSeconds: { ...w(1, 100, 'day', 1), windows: [w(1, 100, 'day', 1)] },
  };

  it('finds a spent window only for the metrics the tool spends, the latest reset first', () => {
    expect(exhaustedBudget({ client }, ['sandboxSeconds'])).toBeUndefined();
    expect(exhaustedBudget({ client }, ['calls', 'sandboxSeconds'])).toMatchObject({
      metric: 'calls',
      window: 'month',
      scope: 'client',
      resetsAt: 2,
    });
  });

  it('shows the window with the least left, compared across metrics by share', () => {
    expect(budgetRemaining({ client })).toBe('calls=0;window=month;scope=client');
    const user: BudgetUse = { calls: { ...w(0, 2, 'day', 1), windows: [w(0, 2, 'day', 1)] } };
    const roomy: BudgetUse = {
      calls: { ...w(2, 1000, 'month', 2), windows: [w(2, 1000, 'month', 2)] },
    };
    expect(budgetRemaining({ client: roomy, user })).toBe('calls=2;window=day;scope=user');
    expect(budgetRemaining({})).toBeUndefined();
  });
});

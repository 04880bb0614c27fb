/** One line of `toolgate doctor`: what was checked, how it went, and what to do about it. */
export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface CheckResult {
  /** Short subject: "redis version", "image python". */
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do, for warn and fail. */
  fix?: string;
}

export const ok = (name: string, detail: string): CheckResult => ({ name, status: 'ok', detail });
export const warn = (name: string, detail: string, fix: string): CheckResult => ({
  name,
  status: 'warn',
  detail,
  fix,
});
export const fail = (name: string, detail: string, fix: string): CheckResult => ({
  name,
  status: 'fail',
  detail,
  fix,
});
export const skip = (name: string, detail: string): CheckResult => ({
  name,
  status: 'skip',
  detail,
});

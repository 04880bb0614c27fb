/** The doctor's `policy` line: the Cedar set of policy.cedar loads and validates (docs/policy.md). */
import type { Config } from '@toolgate/config';
import { PolicySetError, loadPolicySet } from '@toolgate/policy';
import { fail, ok, skip, type CheckResult } from './check.js';

export function checkPolicy(config: Pick<Config, 'policy'>): CheckResult {
  const cedar = config.policy.cedar;
  if (!cedar) return skip('policy', 'no policy.cedar: no Cedar policies');
  try {
    const set = loadPolicySet(cedar);
    return ok('policy', `${set.policies.size} Cedar policies valid, hash ${set.hash}`);
  } catch (err) {
    if (!(err instanceof PolicySetError)) throw err;
    const n = err.problems.length;
    return fail(
      'policy',
      `${n} problem${n === 1 ? '' : 's'} in ${cedar.policies}: ${err.problems
        .slice(0, 3)
        .map((p) => `${p.file}${p.policy ? ` (${p.policy})` : ''}: ${p.message}`)
        .join('; ')}${n > 3 ? '; …' : ''}`,
      `toolgate policy check ${cedar.policies} --schema ${cedar.schema} lists every problem; a running gateway keeps its last good set`,
    );
  }
}

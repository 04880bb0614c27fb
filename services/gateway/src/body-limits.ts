import type { NextFunction, Request, Response } from 'express';
import { ApiError } from './errors.js';

export const MAX_DEPTH = 32;
export const MAX_ARRAY = 10_000;
/** Keys of one object: like arrays, so no one object costs more than this to walk (audit redaction lists keys). */
export const MAX_KEYS = 10_000;
export const MAX_NODES = 200_000;

/**
 * Refuses parsed JSON bodies that are legal but hostile: nesting deeper than MAX_DEPTH,
 * arrays longer than MAX_ARRAY, objects with more than MAX_KEYS keys, more than MAX_NODES values. Iterative, so a deep body cannot
 * overflow the stack here.
 */
export function checkBodyShape(req: Request, _res: Response, next: NextFunction): void {
  const problem = shapeProblem(req.body);
  next(problem ? new ApiError('invalid_json', problem) : undefined);
}

export function shapeProblem(body: unknown): string | undefined {
  const stack: [unknown, number][] = [[body, 1]];
  let nodes = 0;
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (++nodes > MAX_NODES) return `the request body has more than ${MAX_NODES} values`;
    if (typeof value !== 'object' || value === null) continue;
    if (depth > MAX_DEPTH) return `the request body is nested deeper than ${MAX_DEPTH} levels`;
    if (Array.isArray(value)) {
      if (value.length > MAX_ARRAY)
        return `the request body has an array longer than ${MAX_ARRAY} items`;
      for (const v of value) stack.push([v, depth + 1]);
    } else {
      const values = Object.values(value);
      if (values.length > MAX_KEYS)
        return `the request body has an object with more than ${MAX_KEYS} keys`;
      for (const v of values) stack.push([v, depth + 1]);
    }
  }
  return undefined;
}

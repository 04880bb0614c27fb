import type { NextFunction, Request, Response } from 'express';
import { ApiError } from './errors.js';

export const MAX_DEPTH = 32;
export const MAX_ARRAY = 10_000;
export const MAX_NODES = 200_000;

/**
 * Refuses parsed JSON bodies that are legal but hostile: nesting deeper than MAX_DEPTH,
 * arrays longer than MAX_ARRAY, more than MAX_NODES values. Iterative, so a deep body cannot
 * overflow the stack here. Object keys are counted before parsing (verifyBodyKeys).
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
      for (const v of Object.values(value)) stack.push([v, depth + 1]);
    }
  }
  return undefined;
}

/** Object keys in one body, counted in the raw bytes before JSON.parse. */
export const MAX_BODY_KEYS = 4_096;

/**
 * express.json's `verify` hook: runs on the raw body before it is parsed. JSON.parse and the
 * shape walk cost ~1 µs per object key (V8 turns large objects into dictionaries), so a 1 MB
 * body of 85k keys took ~90 ms of the event loop before checkBodyShape could refuse it, 4096 keys
 * cost ~4 ms; one
 * byte scan (~1 ms per MB) refuses it first. UTF-8 only: other charsets go to the parser as before.
 */
export function verifyBodyKeys(
  _req: unknown,
  _res: unknown,
  body: Uint8Array,
  encoding: string | null,
): void {
  if (encoding !== null && !/^utf-?8$/i.test(encoding)) return;
  const problem = rawKeysProblem(body);
  if (problem) throw new ApiError('invalid_json', problem);
}

export function rawKeysProblem(body: Uint8Array): string | undefined {
  let keys = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const b = body[i];
    if (inString) {
      if (b === 0x5c)
        i++; // \x: skip the escaped byte
      else if (b === 0x22) inString = false;
    } else if (b === 0x22) {
      inString = true;
    } else if (b === 0x3a && ++keys > MAX_BODY_KEYS) {
      // Outside strings every ':' introduces one object key.
      return `the request body has more than ${MAX_BODY_KEYS} object keys`;
    }
  }
  return undefined;
}

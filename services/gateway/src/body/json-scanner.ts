/**
 * Checks a JSON body chunk by chunk while it arrives, before anything is parsed: the grammar
 * (RFC 8259) and the limits a body built to be expensive would break. Only a body this scanner
 * accepts reaches JSON.parse, so a malformed or hostile one costs one pass over the bytes that
 * came before its first fault, and the rest of it need not be read at all.
 */

/** Containers nested deeper than this are refused. */
export const MAX_DEPTH = 32;
/** Items in one array. */
export const MAX_ARRAY = 10_000;
/** Values in the whole body, containers included. */
export const MAX_NODES = 200_000;
/**
 * Object keys in the whole body. JSON.parse and a walk of the result cost ~1 µs per key (V8
 * turns large objects into dictionaries): a 1 MB body of 85k keys held the event loop ~90 ms;
 * 4096 keys cost ~4 ms.
 */
export const MAX_BODY_KEYS = 4_096;

// Scanner states. Numbers, not a string union: this loop runs once per byte of every body.
const VALUE = 0; // a value must come (top level, after ':' or after ',' in an array)
const ARRAY_FIRST = 1; // after '[': a value or ']'
const OBJECT_FIRST = 2; // after '{': a key or '}'
const KEY = 3; // after ',' in an object: a key
const COLON = 4; // after a key
const AFTER = 5; // after a value: ',' or the closing bracket (at the top level: nothing)
const STRING = 6;
const ESCAPE = 7; // after '\' in a string
const UNICODE = 8; // in the 4 hex digits of '\u'
const MINUS = 9; // '-': a digit must come
const ZERO = 10; // a leading 0: '.', 'e' or the end of the number
const INT = 11;
const DOT = 12; // '.': a digit must come
const FRAC = 13;
const EXP_MARK = 14; // 'e': a sign or a digit
const EXP_SIGN = 15; // a digit must come
const EXP = 16;
const LITERAL = 17; // inside true, false or null

const IN_OBJECT = 0;
const IN_ARRAY = 1;

/** 1 for the bytes a string may hold as they are: not '"', not '\\', not a control character. */
const PLAIN = new Uint8Array(256).fill(1, 0x20);
PLAIN[0x22] = 0;
PLAIN[0x5c] = 0;

const ascii = new TextEncoder();
const TRUE = ascii.encode('true');
const FALSE = ascii.encode('false');
const NULL = ascii.encode('null');

/** A body the scanner refused: `limit` when it is well-formed so far but over a limit. */
export interface ScanProblem {
  kind: 'syntax' | 'limit';
  message: string;
}

export class JsonScanner {
  private state = VALUE;
  private depth = 0;
  /** IN_OBJECT / IN_ARRAY per open container (index 1..depth). */
  private readonly kinds = new Uint8Array(MAX_DEPTH + 1);
  /** Items so far in each open array. */
  private readonly items = new Int32Array(MAX_DEPTH + 1);
  private keys = 0;
  private values = 0;
  private inKey = false;
  private hexLeft = 0;
  private literal = TRUE;
  private literalAt = 0;
  /** Bytes consumed before the current chunk. */
  private offset = 0;

  /** Feeds the next bytes; the first fault found is returned (and the scanner is spent). */
  write(chunk: Uint8Array): ScanProblem | undefined {
    const n = chunk.length;
    let state = this.state;
    let i = 0;
    // A UTF-8 byte order mark may open the body (the decoder drops it).
    if (this.offset === 0 && n >= 3 && chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf)
      i = 3;
    for (; i < n; i++) {
      const b = chunk[i]!;
      switch (state) {
        case STRING: {
          // The hot loop: most of a body's bytes are inside strings.
          let j = i;
          while (j < n && PLAIN[chunk[j]!] === 1) j++;
          i = j;
          if (j === n) break;
          const c = chunk[j]!;
          if (c === 0x22) state = this.inKey ? COLON : AFTER;
          else if (c === 0x5c) state = ESCAPE;
          else return this.fail(c, i, 'a control character inside a string');
          break;
        }
        case ESCAPE:
          if (b === 0x75) {
            state = UNICODE;
            this.hexLeft = 4;
          } else if (
            b === 0x22 ||
            b === 0x5c ||
            b === 0x2f ||
            b === 0x62 ||
            b === 0x66 ||
            b === 0x6e ||
            b === 0x72 ||
            b === 0x74
          ) {
            state = STRING;
          } else return this.fail(b, i, 'an invalid escape');
          break;
        case UNICODE:
          if (!isHex(b)) return this.fail(b, i, 'an invalid \\u escape');
          if (--this.hexLeft === 0) state = STRING;
          break;
        case VALUE:
        case ARRAY_FIRST:
          if (isSpace(b)) break;
          if (b === 0x5d && state === ARRAY_FIRST) {
            this.depth--;
            state = AFTER;
            break;
          }
          {
            const problem = this.countValue();
            if (problem) return problem;
          }
          switch (b) {
            case 0x7b: // {
            case 0x5b: {
              // [
              if (this.depth === MAX_DEPTH)
                return this.limit(`the request body is nested deeper than ${MAX_DEPTH} levels`);
              const d = ++this.depth;
              if (b === 0x7b) {
                this.kinds[d] = IN_OBJECT;
                state = OBJECT_FIRST;
              } else {
                this.kinds[d] = IN_ARRAY;
                this.items[d] = 0;
                state = ARRAY_FIRST;
              }
              break;
            }
            case 0x22:
              this.inKey = false;
              state = STRING;
              break;
            case 0x2d:
              state = MINUS;
              break;
            case 0x30:
              state = ZERO;
              break;
            case 0x74:
            case 0x66:
            case 0x6e:
              this.literal = b === 0x74 ? TRUE : b === 0x66 ? FALSE : NULL;
              this.literalAt = 1;
              state = LITERAL;
              break;
            default:
              if (b >= 0x31 && b <= 0x39) state = INT;
              else return this.fail(b, i);
          }
          break;
        case OBJECT_FIRST:
        case KEY:
          if (isSpace(b)) break;
          if (b === 0x7d && state === OBJECT_FIRST) {
            this.depth--;
            state = AFTER;
            break;
          }
          if (b !== 0x22) return this.fail(b, i, 'a key must be a string');
          if (++this.keys > MAX_BODY_KEYS)
            return this.limit(`the request body has more than ${MAX_BODY_KEYS} object keys`);
          this.inKey = true;
          state = STRING;
          break;
        case COLON:
          if (isSpace(b)) break;
          if (b !== 0x3a) return this.fail(b, i, '":" must follow a key');
          state = VALUE;
          break;
        case LITERAL:
          if (b !== this.literal[this.literalAt]) return this.fail(b, i);
          if (++this.literalAt === this.literal.length) state = AFTER;
          break;
        case MINUS:
          if (b === 0x30) state = ZERO;
          else if (b >= 0x31 && b <= 0x39) state = INT;
          else return this.fail(b, i, 'a digit must follow "-"');
          break;
        case ZERO:
        case INT:
        case FRAC:
        case EXP:
          if (b >= 0x30 && b <= 0x39 && state !== ZERO) break;
          if (b === 0x2e && (state === ZERO || state === INT)) state = DOT;
          else if ((b === 0x65 || b === 0x45) && state !== EXP) state = EXP_MARK;
          else {
            // The number ended: this byte is read again after it.
            state = AFTER;
            i--;
          }
          break;
        case DOT:
          if (b >= 0x30 && b <= 0x39) state = FRAC;
          else return this.fail(b, i, 'a digit must follow "."');
          break;
        case EXP_MARK:
        case EXP_SIGN:
          if ((b === 0x2b || b === 0x2d) && state === EXP_MARK) state = EXP_SIGN;
          else if (b >= 0x30 && b <= 0x39) state = EXP;
          else return this.fail(b, i, 'a digit must follow the exponent');
          break;
        case AFTER: {
          if (isSpace(b)) break;
          const d = this.depth;
          if (d === 0) return this.fail(b, i, 'more data after the JSON value');
          if (b === 0x2c) state = this.kinds[d] === IN_OBJECT ? KEY : VALUE;
          else if (b === (this.kinds[d] === IN_OBJECT ? 0x7d : 0x5d)) this.depth--;
          else return this.fail(b, i);
          break;
        }
      }
    }
    this.state = state;
    this.offset += n;
    return undefined;
  }

  /** Call once every byte was written: whether the body ended where a JSON text may end. */
  end(): ScanProblem | undefined {
    if (this.offset === 0) return undefined; // an empty body stands for {}
    const s = this.state;
    if (this.depth === 0 && (s === AFTER || s === ZERO || s === INT || s === FRAC || s === EXP))
      return undefined;
    return { kind: 'syntax', message: 'the request body is not valid JSON: it ends too early' };
  }

  private countValue(): ScanProblem | undefined {
    if (++this.values > MAX_NODES)
      return this.limit(`the request body has more than ${MAX_NODES} values`);
    const d = this.depth;
    if (d > 0 && this.kinds[d] === IN_ARRAY && ++this.items[d]! > MAX_ARRAY)
      return this.limit(`the request body has an array longer than ${MAX_ARRAY} items`);
    return undefined;
  }

  private limit(message: string): ScanProblem {
    return { kind: 'limit', message };
  }

  private fail(byte: number, at: number, why?: string): ScanProblem {
    const shown =
      byte >= 0x20 && byte < 0x7f
        ? JSON.stringify(String.fromCharCode(byte))
        : `byte 0x${byte.toString(16).padStart(2, '0')}`;
    return {
      kind: 'syntax',
      message: `the request body is not valid JSON: unexpected ${shown} at byte ${this.offset + at}${why ? ` (${why})` : ''}`,
    };
  }
}

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

function isHex(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) || (b >= 0x41 && b <= 0x46);
}

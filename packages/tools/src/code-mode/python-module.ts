/**
 * The `toolgate` Python module a code-mode script imports, generated per script from the
 * client's tools: one keyword-only function per tool, typed from its JSON Schema, its
 * description and arguments as the docstring. Calls go over the sandbox's channel socket.
 */
import { CHANNEL_SOCKET } from '@toolgate/sandbox';
import { MAX_REQUEST_BYTES } from './channel-server.js';
import type { ScriptTool } from './services.js';

const PY_KEYWORDS = new Set(
  (
    'False None True and as assert async await break class continue def del elif else except ' +
    'finally for from global if import in is lambda nonlocal not or pass raise return try while ' +
    'with yield match case type'
  ).split(' '),
);
/** Names the module itself defines: a tool of that name gets a trailing underscore. */
const RESERVED = new Set(['call', 'help', 'tools', 'ToolError', 'json', 'socket', 'struct']);

/** A tool name as a Python identifier: `github__create-issue` → `github__create_issue`. */
export function pythonName(name: string): string {
  let id = name.replace(/[^A-Za-z0-9_]/g, '_');
  if (/^[0-9]/.test(id)) id = `_${id}`;
  if (PY_KEYWORDS.has(id) || RESERVED.has(id) || id.startsWith('_')) id = `${id}_`;
  return id;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

function pyType(schema: unknown): string {
  const s = (schema ?? {}) as { type?: unknown; enum?: unknown[]; anyOf?: unknown[] };
  const types = Array.isArray(s.type) ? s.type : s.type === undefined ? [] : [s.type];
  const names = types.map((t) => {
    switch (t) {
      case 'string':
        return 'str';
      case 'integer':
        return 'int';
      case 'number':
        return 'float';
      case 'boolean':
        return 'bool';
      case 'array':
        return 'list';
      case 'object':
        return 'dict';
      case 'null':
        return 'None';
      default:
        return '_t.Any';
    }
  });
  if (names.length === 0) return '_t.Any';
  return names.length === 1 ? names[0]! : `_t.Union[${names.join(', ')}]`;
}

/** One line of a description: its first sentence or line, cut to `max` characters. */
export function oneLine(text: string, max = 120): string {
  const first = text.split(/\n|(?<=\.)\s/)[0]?.trim() ?? '';
  return first.length > max ? `${first.slice(0, max - 1)}…` : first;
}

/** A Python string literal for any text (JSON's escapes are Python's). */
function pyString(text: string): string {
  return JSON.stringify(text);
}

function toolFunction(tool: ScriptTool, fnName: string): string {
  const props = (tool.parameters.properties ?? {}) as Record<string, Record<string, unknown>>;
  const required = new Set((tool.parameters.required as string[] | undefined) ?? []);
  const params: string[] = [];
  const docArgs: string[] = [];
  let extra = false;
  for (const [prop, schema] of Object.entries(props)) {
    const description = typeof schema.description === 'string' ? schema.description : '';
    docArgs.push(
      `    ${prop} (${pyType(schema).replace('_t.', '')}${required.has(prop) ? ', required' : ''}): ${oneLine(description, 200)}`,
    );
    if (!IDENTIFIER.test(prop) || PY_KEYWORDS.has(prop) || prop === 'self') {
      extra = true; // reachable as **kwargs
      continue;
    }
    params.push(
      required.has(prop) ? `${prop}: ${pyType(schema)}` : `${prop}: ${pyType(schema)} = _UNSET`,
    );
  }
  // Required ones first: Python wants those without defaults before the others.
  params.sort((a, b) => Number(a.includes('= _UNSET')) - Number(b.includes('= _UNSET')));
  const rest = extra || tool.parameters.additionalProperties !== false;
  // `*` makes the named ones keyword-only; Python refuses a bare `*` right before `**`.
  const signature = [
    ...(params.length > 0 ? ['*', ...params] : []),
    ...(rest ? ['**_extra'] : []),
  ].join(', ');
  const doc = `${tool.description}\n\nArgs:\n${docArgs.join('\n') || '    (none)'}`;
  return [
    `def ${fnName}(${signature}) -> _t.Any:`,
    // locals() first: inside a comprehension it would be the comprehension's (Python < 3.12).
    `    _l = dict(locals())`,
    `    _a = {k: v for k, v in _l.items() if k != '_extra' and v is not _UNSET}`,
    rest ? `    _a.update(_l.get('_extra') or {})` : '',
    `    return _call(${pyString(tool.name)}, _a)`,
    `${fnName}.__doc__ = ${pyString(doc)}`,
    '',
  ]
    .filter((line) => line !== '')
    .join('\n');
}

/** The module's source: the fixed runtime, then one function per tool. */
export function pythonModule(tools: readonly ScriptTool[]): string {
  const used = new Set<string>();
  const names: [string, string][] = [];
  const functions: string[] = [];
  for (const tool of tools) {
    let fn = pythonName(tool.name);
    while (used.has(fn)) fn = `${fn}_`;
    used.add(fn);
    names.push([fn, tool.name]);
    functions.push(toolFunction(tool, fn));
  }
  const runtime = RUNTIME.replace('@SOCKET@', pyString(CHANNEL_SOCKET)).replaceAll(
    '@MAX_REQUEST@',
    String(MAX_REQUEST_BYTES),
  );
  return `${runtime}
_NAMES = {${names.map(([fn, name]) => `${pyString(fn)}: ${pyString(name)}`).join(', ')}}
__all__ = ['call', 'help', 'tools', 'ToolError', *_NAMES]

${functions.join('\n\n')}
`;
}

/**
 * The runtime every generated module starts with: the framed protocol (4-byte big-endian
 * length, then JSON) over one connection per thread.
 */
const RUNTIME = `"""toolgate: the tools you may call, as functions (code mode). help(name) gives a schema."""
import json as _json
import socket as _socket
import struct as _struct
import threading as _threading
import typing as _t

_SOCKET = @SOCKET@
_UNSET = object()
_local = _threading.local()


class ToolError(Exception):
    """A nested call that failed: code (e.g. forbidden, invalid_arguments, timeout), message."""

    def __init__(self, code, message, details=None, call_id=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details
        self.call_id = call_id


def _connection():
    s = getattr(_local, "s", None)
    if s is None:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.connect(_SOCKET)
        _local.s = s
    return s


def _read(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            _local.s = None
            raise ToolError("channel_closed", "the worker closed the code-mode channel")
        buf += chunk
    return bytes(buf)


def _request(message):
    data = _json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > @MAX_REQUEST@:
        raise ToolError("request_too_large", f"a nested call's request is at most @MAX_REQUEST@ bytes of JSON (this one: {len(data)})")
    s = _connection()
    s.sendall(_struct.pack(">I", len(data)) + data)
    (n,) = _struct.unpack(">I", _read(s, 4))
    reply = _json.loads(_read(s, n))
    if reply.get("ok"):
        return reply.get("result")
    e = reply.get("error") or {}
    raise ToolError(e.get("code", "error"), e.get("message", ""), e.get("details"), reply.get("callId"))


def _call(name, args, idempotency_key=None):
    message = {"op": "call", "tool": name, "args": args}
    if idempotency_key is not None:
        message["idempotencyKey"] = idempotency_key
    return _request(message)


def call(name: str, args: _t.Optional[dict] = None, *, idempotency_key: _t.Optional[str] = None, **kwargs) -> _t.Any:
    """Calls a tool by its toolgate name: call("http_get", {"url": "https://example.com"}).

    idempotency_key: the same key with the same call answers the first call's result instead
    of running it again (1-255 characters; the client's keys, as Idempotency-Key over HTTP)."""
    a = dict(args or {})
    a.update(kwargs)
    return _call(name, a, idempotency_key)


def help(name: str) -> dict:
    """The tool's name, description and JSON Schema of its arguments."""
    return _request({"op": "help", "name": _NAMES.get(name, name)})


def tools() -> list:
    """The names of the tools this script may call."""
    return sorted(_NAMES.values())
`;

/**
 * Python's \`-c\` program: reads "<module bytes>\\n<module><script>" from stdin, installs the
 * module as \`toolgate\` (imported and already in the script's globals), runs the script as
 * __main__ under the name <code>, and prints a traceback without its own frame.
 */
export const BOOTSTRAP = `import sys, types, traceback
raw = sys.stdin.buffer.read()
head, _, rest = raw.partition(b"\\n")
n = int(head)
m = types.ModuleType("toolgate")
m.__file__ = "<toolgate>"
exec(compile(rest[:n].decode(), "<toolgate>", "exec"), m.__dict__)
sys.modules["toolgate"] = m
code = rest[n:].decode()
g = {"__name__": "__main__", "__builtins__": __builtins__, "toolgate": m}
del raw, head, rest, n, m
try:
    exec(compile(code, "<code>", "exec"), g)
except SystemExit:
    raise
except BaseException as e:
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
`;

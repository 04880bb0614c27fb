import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { RunResult } from '@toolgate/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifestTools, manifestTool, parseManifest, readResult } from './index.js';

const base = {
  name: 'echo_args',
  description: 'echoes',
  parameters: { type: 'object', properties: { x: { type: 'number' } } },
  image: 'shell',
  command: ['cat'],
};

describe('parseManifest', () => {
  it('fills defaults: no network, no workspace, 30 s, auto output', () => {
    expect(parseManifest(base)).toEqual({
      ...base,
      category: 'custom',
      files: [],
      timeoutSeconds: 30,
      network: false,
      workspace: false,
      output: 'auto',
      cacheTtlSeconds: 0,
      idempotent: false,
    });
  });

  it.each([
    [{ ...base, name: 'has space' }, /^name: Expected string to match/],
    [
      { ...base, timeoutSeconds: 301 },
      /^timeoutSeconds: Expected integer to be less or equal to 300/,
    ],
    [{ ...base, netwrok: true }, 'netwrok: unknown field'],
    [{ ...base, command: [] }, /^command: /],
    [
      { ...base, parameters: { type: 'string' } },
      'parameters: must be a JSON Schema with type: object',
    ],
    [(({ description: _d, ...rest }) => rest)(base), /^description: Expected required property/],
    [
      { ...base, output: 'json', result: { type: 'array' } },
      'result: must be a JSON Schema with type: object',
    ],
    [{ ...base, result: { type: 'object' } }, 'result: needs output: json'],
    [{ ...base, output: 'text', result: { type: 'object' } }, 'result: needs output: json'],
    [['a list'], 'the manifest must be a mapping of fields'],
  ])('rejects %j with a message naming the field', (raw, message) => {
    expect(() => parseManifest(raw)).toThrow(message);
  });
});

const ok = (over: Partial<RunResult>): RunResult => ({
  stdout: '',
  stderr: '',
  exitCode: 0,
  timedOut: false,
  truncated: false,
  outputLimited: false,
  oomKilled: false,
  durationMs: 1,
  driver: 'bwrap',
  warm: false,
  ...over,
});

describe('manifestTool', () => {
  it('declares the result schema it was given, and none otherwise', () => {
    const result = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    const tool = (extra: object) =>
      manifestTool({ manifest: parseManifest({ ...base, ...extra }), dir: '.', files: [] });
    expect(tool({ output: 'json', result }).result).toEqual(result);
    expect(tool({}).result).toBeUndefined();
  });

  it('caches per client when the tool reads the caller workspace', () => {
    const tool = (extra: object) =>
      manifestTool({ manifest: parseManifest({ ...base, ...extra }), dir: '.', files: [] });
    expect(tool({ cacheTtlSeconds: 60 }).cacheScope).toBe('global');
    expect(tool({ cacheTtlSeconds: 60, workspace: true }).cacheScope).toBe('client');
  });
});

describe('readResult', () => {
  it('reads JSON, or text, as the output mode says', () => {
    expect(readResult('t', 'auto', 5, ok({ stdout: '{"a":1}\n' }))).toEqual({ a: 1 });
    expect(readResult('t', 'auto', 5, ok({ stdout: 'plain words\n' }))).toBe('plain words\n');
    expect(readResult('t', 'text', 5, ok({ stdout: '{"a":1}' }))).toBe('{"a":1}');
    expect(() => readResult('t', 'json', 5, ok({ stdout: 'nope' }))).toThrow(
      expect.objectContaining({ code: 'invalid_output' }),
    );
  });

  it('turns failures into errors the model can read', () => {
    expect(() => readResult('t', 'auto', 5, ok({ exitCode: 2, stderr: 'boom\n' }))).toThrow(
      expect.objectContaining({ code: 'tool_error', message: 't failed (exit status 2): boom' }),
    );
    const own = ok({ exitCode: 1, stdout: '{"error":{"code":"bad_input","message":"no"}}' });
    expect(() => readResult('t', 'auto', 5, own)).toThrow(
      expect.objectContaining({ code: 'bad_input', message: 'no' }),
    );
    expect(() => readResult('t', 'auto', 5, ok({ timedOut: true, exitCode: 137 }))).toThrow(
      expect.objectContaining({
        code: 'timeout',
        message: 't did not finish within 5 s and was killed',
      }),
    );
    expect(() => readResult('t', 'auto', 5, ok({ truncated: true }))).toThrow(
      expect.objectContaining({ code: 'output_limit' }),
    );
    expect(() => readResult('t', 'auto', 5, ok({ oomKilled: true, exitCode: 137 }))).toThrow(
      expect.objectContaining({ code: 'out_of_memory' }),
    );
  });
});

describe('loadManifestTools', () => {
  let root: string;
  const quiet = { debug() {}, info() {}, error() {} };
  const put = async (dir: string, files: Record<string, string>) => {
    await mkdir(path.join(root, dir), { recursive: true });
    for (const [name, text] of Object.entries(files))
      await writeFile(path.join(root, dir, name), text);
  };

  beforeAll(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'tg-manifests-'));
    await put('a-good', {
      'tool.yaml':
        'name: good\ndescription: d\nparameters: {type: object}\nimage: python\ncommand: [python3, m.py]\nfiles: [m.py]\n',
      'm.py': 'print(1)\n',
    });
    await put('b-json', { 'tool.json': JSON.stringify({ ...base, name: 'from_json' }) });
    await put('c-bad-yaml', { 'tool.yaml': 'name: [unclosed\n' });
    await put('d-missing-file', {
      'tool.yaml':
        'name: m\ndescription: d\nparameters: {type: object}\nimage: python\ncommand: [x]\nfiles: [gone.py]\n',
    });
    await put('e-escape', {
      'tool.yaml':
        'name: e\ndescription: d\nparameters: {type: object}\nimage: python\ncommand: [x]\nfiles: [../a-good/m.py]\n',
    });
    await put('f-taken', { 'tool.json': JSON.stringify({ ...base, name: 'calculator' }) });
    await put('g-image', { 'tool.json': JSON.stringify({ ...base, name: 'gpu', image: 'cuda' }) });
    await put('h-bad-schema', {
      'tool.json': JSON.stringify({
        ...base,
        name: 'h',
        parameters: { type: 'object', properties: { x: { type: 'nonsense' } } },
      }),
    });
    await put('i-plugin-only', { 'plugin.mjs': 'export default {}' });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('loads good manifests and reports each broken one', async () => {
    const r = await loadManifestTools([root, path.join(root, 'nowhere')], quiet, {
      reserved: ['calculator'],
      images: ['python', 'shell'],
    });
    expect(r.loaded.map((t) => t.name)).toEqual(['good', 'from_json']);
    expect(r.tools.map((t) => [t.name, t.sandbox?.image])).toEqual([
      ['good', 'python'],
      ['from_json', 'shell'],
    ]);
    expect(Object.fromEntries(r.failed.map((f) => [path.basename(f.dir), f.error]))).toEqual({
      'c-bad-yaml': expect.stringContaining('tool.yaml is not valid'),
      'd-missing-file': expect.stringContaining('files: "gone.py" is not a file'),
      'e-escape': 'files: "../a-good/m.py" is outside the tool\'s folder',
      'f-taken': 'tool "calculator" is already provided by toolgate or a plugin',
      'g-image': 'image: no sandbox image "cuda" (configured: python, shell)',
      'h-bad-schema': expect.stringContaining('invalid schema'),
    });
  });
});

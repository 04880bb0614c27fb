import { execFileSync } from 'node:child_process';
import { Type } from '@sinclair/typebox';
import { ToolRegistry, type Tool } from '@toolgate/registry';
import { describe, expect, it } from 'vitest';
import { BOOTSTRAP, pythonModule, pythonName } from './python-module.js';
import type { ScriptTool } from './services.js';
import { MAX_DESCRIPTION_CHARS, describeFor } from './tool.js';

/** Runs Python on the host: the module must be valid Python whatever the tools look like. */
function python(source: string): string {
  return execFileSync('python3', ['-c', source], { encoding: 'utf8' });
}

const hostile: ScriptTool[] = [
  {
    name: 'github__create-issue',
    description: 'Makes an issue """ with quotes \\ and a\nnewline',
    parameters: {
      type: 'object',
      properties: {
        title: { type: 'string', description: 'the "title"' },
        'x-trace': { type: 'string' },
        class: { type: 'integer' },
        labels: { type: ['array', 'null'] },
      },
      required: ['title'],
    },
  },
  { name: 'call', description: 'shadows the module', parameters: { type: 'object' } },
  { name: '9lives', description: '', parameters: { type: 'object', properties: {} } },
];

describe('the generated toolgate module', () => {
  it('maps tool names to Python identifiers', () => {
    expect(pythonName('http_get')).toBe('http_get');
    expect(pythonName('github__create-issue')).toBe('github__create_issue');
    expect(pythonName('class')).toBe('class_');
    expect(pythonName('help')).toBe('help_');
    expect(pythonName('9lives')).toBe('_9lives_');
  });

  it('is valid Python for hostile names, descriptions and properties, with typed signatures', () => {
    const module = pythonModule(hostile);
    const out = python(
      `import types, inspect
m = types.ModuleType("toolgate")
exec(compile(${JSON.stringify(module)}, "<toolgate>", "exec"), m.__dict__)
print(inspect.signature(m.github__create_issue))
print(m.github__create_issue.__doc__.splitlines()[0])
print(sorted(m._NAMES.values()))
print(callable(m.call), callable(m.call_))`,
    );
    const [signature, doc, names, callables] = out.trim().split('\n');
    // Required first, typed; optional ones default to unset; odd names only through **_extra.
    expect(signature).toMatch(
      /^\(\*, title: str, labels: \w+\[list.*\] = <object object at 0x[0-9a-f]+>, \*\*_extra\) -> Any$/,
    );
    expect(doc).toBe('Makes an issue """ with quotes \\ and a');
    expect(names).toBe("['9lives', 'call', 'github__create-issue']");
    expect(callables).toBe('True True');
  });

  it('the bootstrap runs the script as __main__ with toolgate imported, tracebacks without itself', () => {
    const module = pythonModule([]);
    const run = (code: string) => {
      try {
        return execFileSync('python3', ['-c', BOOTSTRAP], {
          input: `${Buffer.byteLength(module)}\n${module}${code}`,
          encoding: 'utf8',
          stdio: ['pipe', 'pipe', 'pipe'],
        });
      } catch (err) {
        return (err as { stderr: string }).stderr;
      }
    };
    expect(run('import toolgate as t\nprint(__name__, t is toolgate, toolgate.tools())')).toBe(
      '__main__ True []\n',
    );
    const failed = run('x = 1\nraise ValueError("é")');
    expect(failed).toContain('File "<code>", line 2');
    expect(failed).toContain('ValueError: é');
    expect(failed).not.toContain('exec(compile');
  });
});

describe("run_code_with_tools's listing", () => {
  it('names each function in one line and stays within its bound for 500 tools', () => {
    const registry = new ToolRegistry();
    for (let i = 0; i < 500; i++)
      registry.register({
        name: `tool_${i}`,
        description: `Does thing ${i}. ${'More words. '.repeat(50)}`,
        category: 'test',
        parameters: Type.Object({}),
        handler: () => null,
      });
    const tools: Tool[] = registry.list();
    const text = describeFor(tools);
    expect(text.length).toBeLessThanOrEqual(MAX_DESCRIPTION_CHARS);
    expect(text).toContain('\n- tool_0: Does thing 0.');
    expect(text).toMatch(/… and \d+ more \(toolgate\.tools\(\)\)$/);
  });
});

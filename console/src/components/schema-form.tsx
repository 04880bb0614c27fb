/**
 * A tool's JSON Schema as a form: strings, numbers, integers, booleans, enums and arrays of
 * strings get their own controls; anything else (nested objects, unions) a JSON text box.
 */
import { useState } from 'preact/hooks';

type Schema = {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  anyOf?: Schema[];
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  description?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
};

type Kind = 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'strings' | 'json';

function kindOf(s: Schema): Kind {
  const literals = s.anyOf?.every((a) => a.const !== undefined);
  if (s.enum || literals) return 'enum';
  if (s.type === 'string') return 'string';
  if (s.type === 'number') return 'number';
  if (s.type === 'integer') return 'integer';
  if (s.type === 'boolean') return 'boolean';
  if (s.type === 'array' && s.items?.type === 'string' && !s.items.enum) return 'strings';
  return 'json';
}

const choices = (s: Schema): unknown[] => s.enum ?? s.anyOf?.map((a) => a.const) ?? [];

/** Field texts → the arguments object, or the first field that does not parse. */
export function toArgs(
  schema: Schema,
  values: Record<string, string | boolean>,
): { args: Record<string, unknown> } | { field: string; message: string } {
  const args: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(schema.properties ?? {})) {
    const v = values[name];
    const kind = kindOf(s);
    if (kind === 'boolean') {
      if (v !== undefined) args[name] = v === true;
      continue;
    }
    const text = typeof v === 'string' ? v : '';
    if (text.trim() === '') continue; // left out: the gateway says if it was required
    switch (kind) {
      case 'string':
        args[name] = text;
        break;
      case 'number':
      case 'integer': {
        const n = Number(text);
        if (!Number.isFinite(n) || (kind === 'integer' && !Number.isInteger(n)))
          return {
            field: name,
            message: `${name}: not ${kind === 'integer' ? 'an integer' : 'a number'}`,
          };
        args[name] = n;
        break;
      }
      case 'enum':
        args[name] = choices(s).find((c) => String(c) === text) ?? text;
        break;
      case 'strings':
        args[name] = text.split('\n').filter((l) => l !== '');
        break;
      case 'json':
        try {
          args[name] = JSON.parse(text) as unknown;
        } catch {
          return { field: name, message: `${name}: not valid JSON` };
        }
    }
  }
  return { args };
}

export function SchemaForm(props: {
  tool: string;
  schema: Schema;
  busy: boolean;
  onRun: (args: Record<string, unknown>) => void;
}) {
  const [values, setValues] = useState<Record<string, string | boolean>>({});
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const set = (name: string, v: string | boolean) => setValues((old) => ({ ...old, [name]: v }));
  const required = new Set(props.schema.required ?? []);
  const fields = Object.entries(props.schema.properties ?? {});

  return (
    <form
      class="schema-form"
      aria-label={`Arguments of ${props.tool}`}
      onSubmit={(e) => {
        e.preventDefault();
        const r = toArgs(props.schema, values);
        if ('field' in r) {
          setProblem(r.message);
          document.getElementById(`arg-${r.field}`)?.focus();
          return;
        }
        setProblem(undefined);
        props.onRun(r.args);
      }}
    >
      {fields.length === 0 && <p class="hint">This tool takes no arguments.</p>}
      {fields.map(([name, s]) => {
        const id = `arg-${name}`;
        const kind = kindOf(s);
        const text = typeof values[name] === 'string' ? (values[name] as string) : '';
        const hint = s.description ? <small id={`${id}-hint`}>{s.description}</small> : null;
        const describedBy = s.description ? `${id}-hint` : undefined;
        const label = (
          <label for={id}>
            {name}
            {required.has(name) ? ' (required)' : ''}
            {kind === 'strings' ? ' — one per line' : kind === 'json' ? ' — JSON' : ''}
          </label>
        );
        if (kind === 'boolean')
          return (
            <div class="field field-check" key={name}>
              <input
                id={id}
                type="checkbox"
                checked={values[name] === true}
                aria-describedby={describedBy}
                onChange={(e) => set(name, e.currentTarget.checked)}
              />
              {label}
              {hint}
            </div>
          );
        return (
          <div class="field" key={name}>
            {label}
            {kind === 'enum' ? (
              <select
                id={id}
                value={text}
                aria-describedby={describedBy}
                onChange={(e) => set(name, e.currentTarget.value)}
              >
                <option value="">{required.has(name) ? 'choose…' : '(not set)'}</option>
                {choices(s).map((c) => (
                  <option key={String(c)} value={String(c)}>
                    {String(c)}
                  </option>
                ))}
              </select>
            ) : kind === 'strings' || kind === 'json' ? (
              <textarea
                id={id}
                rows={4}
                value={text}
                aria-describedby={describedBy}
                onInput={(e) => set(name, e.currentTarget.value)}
              />
            ) : kind === 'string' ? (
              <input
                id={id}
                type="text"
                required={required.has(name)}
                value={text}
                aria-describedby={describedBy}
                onInput={(e) => set(name, e.currentTarget.value)}
              />
            ) : (
              <input
                id={id}
                type="number"
                step={kind === 'integer' ? 1 : 'any'}
                required={required.has(name)}
                value={text}
                aria-describedby={describedBy}
                onInput={(e) => set(name, e.currentTarget.value)}
              />
            )}
            {hint}
          </div>
        );
      })}
      {problem && (
        <p class="error" role="alert">
          {problem}
        </p>
      )}
      <button type="submit" disabled={props.busy}>
        Run
      </button>
    </form>
  );
}

/**
 * Unknown fields in rendered objects. The JSON schemas kubernetes-models validates with come from
 * Kubernetes' OpenAPI, which does not forbid extra properties, so a misspelt field
 * (`readinesProbe`) passes them and the API server would drop it. The same package's TypeScript
 * interfaces are closed, so the objects are type-checked as object literals against them: an
 * excess property is a compile error naming the field.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const HERE = path.dirname(fileURLToPath(import.meta.url));

interface Typed {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
}

function moduleOf(apiVersion: string, kind: string): string {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (group === 'keda.sh') return `@kubernetes-models/keda/keda.sh/${version}/${kind}`;
  if (group === 'monitoring.coreos.com')
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/${version}/${kind}`;
  return `kubernetes-models/${group ? `${group}/` : ''}${version}/${kind}`;
}

/** One message per field the interfaces do not know ("Deployment/x: … 'readinesProbe' …"). */
export function unknownFields(objects: readonly Typed[]): string[] {
  const file = path.join(HERE, '__rendered_objects__.ts');
  const lines = objects.map(
    (o, i) =>
      `import type { I${o.kind} as T${i} } from '${moduleOf(o.apiVersion, o.kind)}';\n` +
      `export const o${i}: T${i} = ${JSON.stringify(o)};`,
  );
  const text = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, lang, ...rest) =>
    name === file
      ? ts.createSourceFile(name, text, lang)
      : getSourceFile.call(host, name, lang, ...rest);
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  host.readFile = (name) => (name === file ? text : readFile.call(host, name));
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    if (d.file?.fileName !== file || d.start === undefined) return message;
    const line = d.file.getLineAndCharacterOfPosition(d.start).line;
    const o = objects[Math.floor(line / 2)];
    return `${o ? `${o.kind}/${o.metadata.name}` : '?'}: ${message}`;
  });
}

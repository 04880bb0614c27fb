/**
 * Which calls start code mode, asked by the pipeline (a token's scopes go with the script) and
 * by the code-mode route (a nested call cannot start it).
 */
/** Tools a nested call cannot run: code mode is one level deep. */
export const CODE_MODE_TOOL = 'run_code_with_tools';

/** Whether this call would start code mode (run_code_with_tools, or run_python with tools). */
export function startsCodeMode(tool: string, args: unknown): boolean {
  if (tool === CODE_MODE_TOOL) return true;
  return (
    tool === 'run_python' &&
    typeof args === 'object' &&
    args !== null &&
    (args as { tools?: unknown }).tools === true
  );
}

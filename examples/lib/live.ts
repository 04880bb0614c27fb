import type { LiveCalls } from './toolgate.ts';

/**
 * Live output on stderr, and Ctrl-C: the first cancels the tool calls still running (toolgate
 * kills their sandboxes and the model reads that they were cancelled), a second one quits.
 */
export function liveOnTerminal(): LiveCalls {
  const controller = new AbortController();
  process.on('SIGINT', () => {
    if (controller.signal.aborted) process.exit(130);
    process.stderr.write('\n[cancelling the running tool calls; Ctrl-C again to quit]\n');
    controller.abort();
  });
  return {
    signal: controller.signal,
    onOutput: (tool, stream, text) =>
      process.stderr.write(
        text.replace(/^(?=.)/gm, `  ${tool}${stream === 'stderr' ? ' (stderr)' : ''} │ `),
      ),
  };
}

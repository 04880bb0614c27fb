/** When a following command (`--follow`, `-f`) should stop: io.signal, else Ctrl-C or SIGTERM. */
import type { CliIo } from '../command.js';

export interface Interrupt {
  signal: AbortSignal;
  /** Whether the user stopped it (as opposed to the stream ending). */
  readonly interrupted: boolean;
  /** Stops listening for signals (the command is done). */
  dispose(): void;
}

export function interrupt(io: Pick<CliIo, 'signal'>): Interrupt {
  const stop = new AbortController();
  let interrupted = false;
  const onStop = () => {
    interrupted = true;
    stop.abort();
  };
  const given = io.signal;
  if (given) {
    if (given.aborted) onStop();
    else given.addEventListener('abort', onStop, { once: true });
  } else {
    process.once('SIGINT', onStop);
    process.once('SIGTERM', onStop);
  }
  return {
    signal: stop.signal,
    get interrupted() {
      return interrupted;
    },
    dispose() {
      given?.removeEventListener('abort', onStop);
      process.removeListener('SIGINT', onStop);
      process.removeListener('SIGTERM', onStop);
    },
  };
}

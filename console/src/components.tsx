/** Small pieces every page uses. */
import type { CallStatus } from '@toolgate/gateway';
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError } from './api.js';
import { json } from './format.js';

export function Status({ status }: { status: CallStatus | string }) {
  return <span class={`status status-${status}`}>{status}</span>;
}

export function Json({ value, label }: { value: unknown; label: string }) {
  return (
    <pre class="json" aria-label={label} tabIndex={0}>
      {json(value)}
    </pre>
  );
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const text =
    error instanceof ApiError
      ? `${error.code}: ${error.message}`
      : error instanceof Error
        ? error.message
        : String(error);
  return (
    <p class="error" role="alert">
      {text}
    </p>
  );
}

export function Page({ title, children }: { title: string; children: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · toolgate`;
  }, [title]);
  return (
    <section class="page" aria-labelledby="page-title">
      <h1 id="page-title">{title}</h1>
      {children}
    </section>
  );
}

/** Re-renders every `ms` (ages and countdowns). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

/** Loads `load()` now and every `ms` (0: once), until the component goes or `deps` change. */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, ms: number, deps: unknown[]) {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const v = await load(ctl.signal);
        if (ctl.signal.aborted) return;
        setData(v);
        setError(undefined);
      } catch (e) {
        if (!ctl.signal.aborted) setError(e);
      }
      if (ms > 0 && !ctl.signal.aborted) timer = setTimeout(() => void run(), ms);
    };
    void run();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, deps);
  return { data, error };
}

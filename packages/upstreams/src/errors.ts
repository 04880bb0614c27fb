/** Errors shared by the upstream connections (HTTP and stdio). */
import type { UpstreamConfig } from '@toolgate/config';
import { ToolError } from '@toolgate/registry';

export function unavailable(upstream: UpstreamConfig, why: string, cause?: unknown): ToolError {
  return new ToolError(
    'upstream_unavailable',
    `upstream "${upstream.id}" is unavailable: ${why}`,
    cause === undefined ? {} : { cause },
  );
}

/**
 * Rich outputs of a Python session's call (docs/tool-results.md#attachments), as a Jupyter
 * kernel's display_data: matplotlib figures and `display(obj)` as `image/png` or `text/plain`
 * attachments next to stdout. MCP sends images as `image` content blocks; the HTTP result
 * carries them base64; the text a model reads (dialects, MCP text) names them without data.
 */
import { Type, type Static } from '@toolgate/registry';

/** Bounds on one call's attachments: beyond them an attachment is omitted with a code. */
export const ATTACHMENT_LIMITS = {
  /** Attachments one call returns (more are omitted: `too_many_attachments`). */
  count: 4,
  /** Largest attachment, in bytes before base64 (a bigger one: `attachment_too_large`). */
  bytes: 1_048_576,
} as const;

export const ATTACHMENT_MIME_TYPES = ['image/png', 'text/plain'] as const;
export type AttachmentMimeType = (typeof ATTACHMENT_MIME_TYPES)[number];

export const AttachmentSchema = Type.Object(
  {
    mimeType: Type.Union(ATTACHMENT_MIME_TYPES.map((m) => Type.Literal(m))),
    encoding: Type.Union([Type.Literal('base64'), Type.Literal('utf-8')], {
      description: 'image/png: base64; text/plain: the text itself',
    }),
    data: Type.String(),
    bytes: Type.Integer({ minimum: 0, description: 'Size of the decoded data' }),
  },
  { additionalProperties: false },
);
export type Attachment = Static<typeof AttachmentSchema>;

export const OmittedAttachmentSchema = Type.Object(
  {
    mimeType: Type.String(),
    bytes: Type.Integer({ minimum: 0 }),
    code: Type.Union([Type.Literal('attachment_too_large'), Type.Literal('too_many_attachments')]),
  },
  { additionalProperties: false },
);
export type OmittedAttachment = Static<typeof OmittedAttachmentSchema>;

/** A result's attachments, if it has any (any tool's result, read structurally). */
export function attachmentsOf(result: unknown): Attachment[] {
  if (typeof result !== 'object' || result === null) return [];
  const list = (result as { attachments?: unknown }).attachments;
  if (!Array.isArray(list)) return [];
  return list.filter(
    (a): a is Attachment =>
      typeof a === 'object' &&
      a !== null &&
      typeof (a as Attachment).mimeType === 'string' &&
      typeof (a as Attachment).data === 'string',
  );
}

/** The result as a model reads it in text: images without their base64 (texts stay). */
export function withoutAttachmentData(result: unknown): unknown {
  if (attachmentsOf(result).length === 0) return result;
  const { attachments, ...rest } = result as { attachments: Attachment[] };
  return {
    ...rest,
    attachments: attachments.map((a) =>
      a.encoding === 'base64' ? { mimeType: a.mimeType, bytes: a.bytes } : a,
    ),
  };
}

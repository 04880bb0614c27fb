/**
 * The gateway's body reader (in place of express.json): every request body is JSON in UTF-8,
 * whatever its Content-Type says. What can be refused is refused before or while the bytes
 * arrive, so a refused body costs the event loop no parse and, when it is large, no more reading:
 * - a charset other than UTF-8 (RFC 8259 §8.1) or an unknown Content-Encoding: 415, unread;
 * - a declared Content-Length over the limit: 413, unread;
 * - each chunk goes through the JsonScanner as it arrives; its first fault (syntax, depth,
 *   keys, array length, values) or the limit passed is answered at once, mid-body.
 * Only a body the scanner accepted whole reaches JSON.parse.
 * A client that sent `Expect: 100-continue` gets its 100 Continue only once those checks passed
 * (deferContinue), so a refused body is not even sent.
 */
import { Buffer } from 'node:buffer';
import type { IncomingMessage, Server } from 'node:http';
import type { Transform } from 'node:stream';
import zlib from 'node:zlib';
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../errors.js';
import { JsonScanner } from './json-scanner.js';

/**
 * After a refusal, the rest of a body is read and dropped, and the connection stays open, when
 * at most this much is still to come (a chunked body: until this much more was dropped, then the
 * connection is cut). A client that sends its whole body before it reads (Python's http.client,
 * curl) would otherwise be reset while it sends and never read the answer. A body declared
 * larger is answered with `Connection: close` at once: nobody reads that much for nothing.
 */
export const DRAIN_BYTES = 4 * 1024 * 1024;

const UTF8 = /^utf-?8$/i;
/** The Content-Type's charset parameter, quoted or not (RFC 9110 §8.3.1). */
const CHARSET = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i;
// The TextDecoder drops a leading byte order mark and replaces invalid sequences (as
// body-parser's decoding did): JSON.parse then sees U+FFFD, a legal string character.
const decoder = new TextDecoder('utf-8');

const DECOMPRESSORS: Record<string, () => Transform> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
  zstd: () => zlib.createZstdDecompress(),
};

/** Requests whose client waits for 100 Continue before it sends the body; see deferContinue. */
const awaitingContinue = new WeakSet<IncomingMessage>();

/**
 * Node answers `Expect: 100-continue` with 100 Continue as soon as the headers are in, before
 * any middleware ran: a client told to go on sends its megabyte even when the answer is a 401,
 * a 429 or a 415 it could have had from the headers. With this listener the request runs
 * through the app as usual and readJsonBody sends 100 Continue when it starts reading; an answer
 * given before that goes out without it, and Node then closes the connection (the client may or
 * may not send the body, so the next bytes could not be told apart from a new request).
 */
export function deferContinue(server: Server): void {
  server.on('checkContinue', (req: IncomingMessage, res) => {
    awaitingContinue.add(req);
    server.emit('request', req, res);
  });
}

export interface JsonBodyOptions {
  /** `server.bodyLimitBytes`: the body's size once decompressed. */
  limitBytes: number;
}

export function readJsonBody({ limitBytes }: JsonBodyOptions) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const lengthHeader = req.headers['content-length'];
    const chunked = req.headers['transfer-encoding'] !== undefined;
    if (!chunked && lengthHeader === undefined) return next(); // no body
    // Node's parser has checked the header's digits; a chunked body's length is unknown.
    const declared = chunked ? undefined : Number(lengthHeader);

    let received = 0; // raw bytes off the wire (compressed ones, if compressed)
    let settled = false;
    let inflate: Transform | undefined;
    const onRaw = (chunk: Buffer) => {
      received += chunk.length;
    };

    const refuse = (err: ApiError) => {
      if (settled) return;
      settled = true;
      (inflate ?? req).off('data', onData).off('end', onEnd);
      req.off('data', onRaw).off('error', onRequestError).off('close', onClose);
      if (inflate) {
        inflate.off('error', onInflateError);
        req.unpipe(inflate);
        inflate.destroy();
      }
      if (!req.complete) {
        if (declared !== undefined && declared - received > DRAIN_BYTES) {
          res.set('Connection', 'close');
        } else if (declared === undefined) {
          let dropped = 0;
          const cut = () => req.socket.destroy();
          req.on('data', (chunk: Buffer) => {
            dropped += chunk.length;
            if (dropped <= DRAIN_BYTES || dropped - chunk.length > DRAIN_BYTES) return;
            if (res.writableFinished) cut();
            else res.once('finish', cut);
          });
        }
        // Whatever still arrives is dropped; with `Connection: close` only until the answer is
        // out. Reading on (rather than leaving it unread) lets the client read that answer: a
        // socket closed with unread input is reset, which can discard the answer in flight.
        req.on('error', () => undefined).resume();
      }
      next(err);
    };

    const charset = CHARSET.exec(req.headers['content-type'] ?? '');
    const named = charset?.[1] ?? charset?.[2];
    if (named !== undefined && !UTF8.test(named)) {
      return refuse(
        new ApiError(
          'unsupported_media_type',
          `request bodies are JSON in UTF-8 (RFC 8259 §8.1), not charset "${named.slice(0, 40)}"`,
        ),
      );
    }
    if (declared !== undefined && declared > limitBytes) return refuse(tooLarge(limitBytes));
    const coding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    if (coding !== 'identity') {
      const decompressor = Object.hasOwn(DECOMPRESSORS, coding) ? DECOMPRESSORS[coding] : undefined;
      if (!decompressor) {
        return refuse(
          new ApiError(
            'unsupported_media_type',
            `Content-Encoding "${coding.slice(0, 40)}" is not supported (gzip, deflate, br, zstd or none)`,
          ),
        );
      }
      inflate = req.pipe(decompressor());
    }
    if (awaitingContinue.delete(req)) res.writeContinue(); // every check on the headers passed

    const scanner = new JsonScanner();
    const chunks: Buffer[] = [];
    let size = 0;
    function onData(chunk: Buffer): void {
      size += chunk.length;
      if (size > limitBytes) return refuse(tooLarge(limitBytes));
      const problem = scanner.write(chunk);
      if (problem) return refuse(new ApiError('invalid_json', problem.message));
      chunks.push(chunk);
    }
    function onEnd(): void {
      const problem = scanner.end();
      if (problem) return refuse(new ApiError('invalid_json', problem.message));
      let body: unknown = {}; // an empty body stands for {}
      if (size > 0) {
        try {
          body = JSON.parse(decoder.decode(Buffer.concat(chunks, size)));
        } catch (err) {
          // The scanner accepts only JSON, so this is a scanner bug, still the client's 400.
          return refuse(
            new ApiError('invalid_json', `the request body is not valid JSON: ${String(err)}`),
          );
        }
      }
      settled = true;
      req.off('data', onRaw).off('error', onRequestError).off('close', onClose);
      req.body = body;
      next();
    }
    function onInflateError(err: Error): void {
      refuse(
        new ApiError(
          'invalid_request',
          `the request body could not be decompressed: ${err.message}`,
          { cause: err },
        ),
      );
    }
    function onRequestError(err: Error): void {
      refuse(new ApiError('invalid_request', 'the request body was cut short', { cause: err }));
    }
    function onClose(): void {
      if (!req.complete) onRequestError(new Error('connection closed'));
    }

    req.on('data', onRaw).on('error', onRequestError).on('close', onClose);
    inflate?.on('error', onInflateError);
    (inflate ?? req).on('data', onData).on('end', onEnd);
  };
}

function tooLarge(limitBytes: number): ApiError {
  return new ApiError(
    'payload_too_large',
    `the request body is larger than the limit (${limitBytes} bytes)`,
  );
}

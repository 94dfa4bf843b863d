/** One SSE `message` event carrying a JSON-RPC message, with its id when given; encode once, write to many. */
export function encodeEvent(message: unknown, eventId?: string): Buffer {
  return Buffer.from(`${eventId === undefined ? "" : `id: ${eventId}\n`}event: message\ndata: ${JSON.stringify(message)}\n\n`);
}

/**
 * A frame, given in parts, as one HTTP/1.1 chunk (its size in hex, CRLF, the bytes, CRLF): what a
 * chunked response puts on the wire for it (see `SseStream.write`).
 */
export function httpChunk(...parts: readonly Buffer[]): Buffer {
  let length = 0;
  for (const part of parts) length += part.length;
  const head = `${length.toString(16)}\r\n`;
  const chunk = Buffer.allocUnsafe(head.length + length + 2);
  let at = chunk.write(head, 0, "latin1");
  for (const part of parts) at += part.copy(chunk, at);
  chunk.write("\r\n", at, "latin1");
  return chunk;
}

/** The frame inside a chunk made by `httpChunk` (the same memory). */
export function chunkBody(chunk: Buffer): Buffer {
  return chunk.subarray(chunk.indexOf("\r\n") + 2, chunk.length - 2);
}

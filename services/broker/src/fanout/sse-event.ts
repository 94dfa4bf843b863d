/** One SSE `message` event carrying a JSON-RPC message, with its id when given; encode once, write to many. */
export function encodeEvent(message: unknown, eventId?: string): Buffer {
  return Buffer.from(`${eventId === undefined ? "" : `id: ${eventId}\n`}event: message\ndata: ${JSON.stringify(message)}\n\n`);
}

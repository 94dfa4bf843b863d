import { StreamableHTTPClientTransport, type FetchLike, type Transport } from "@modelcontextprotocol/client";
import type { Clock } from "@mcp-broker/shared";
import type { TransportHooks } from "./connection.js";

export interface HttpTransportOptions {
  url: URL;
  headers: Record<string, string> | undefined;
  fetch: FetchLike | undefined;
  clock: Clock;
}

/**
 * Streamable HTTP to `url`. The SDK transport resumes a broken SSE stream on its own (with
 * Last-Event-ID: on a broker fleet another instance may take over); each resumption it schedules
 * is also the cue to check that the server is still there.
 */
export function createHttpTransport({ url, headers, fetch, clock }: HttpTransportOptions, hooks: TransportHooks): Transport {
  return new StreamableHTTPClientTransport(url, {
    ...(headers !== undefined && { requestInit: { headers } }),
    ...(fetch !== undefined && { fetch }),
    reconnectionScheduler: (reconnect, delay) => {
      hooks.interrupted();
      const timer = clock.setTimeout(reconnect, delay);
      return () => clock.clearTimeout(timer);
    },
  });
}

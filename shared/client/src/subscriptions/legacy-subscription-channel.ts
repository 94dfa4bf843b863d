import { ProtocolError } from "@modelcontextprotocol/client";
import type { Connection } from "../connection/connection.js";
import type { SubscriptionChannel } from "./subscription-channel.js";

/**
 * Subscriptions of a legacy (2025-11-25) connection: one `resources/subscribe` per URI. The
 * server forgets them with the session, so there is nothing to close.
 */
export class LegacySubscriptionChannel implements SubscriptionChannel {
  constructor(private readonly connection: Connection) {}

  async add(uri: string): Promise<void> {
    await this.connection.request((client, options) => client.subscribeResource({ uri }, options));
  }

  async remove(uri: string): Promise<void> {
    await this.connection.request((client, options) => client.unsubscribeResource({ uri }, options));
  }

  async restore(uris: readonly string[]): Promise<Map<string, unknown>> {
    const refused = new Map<string, unknown>();
    for (const uri of uris) {
      try {
        await this.add(uri);
      } catch (error) {
        // A JSON-RPC error is about this URI; anything else means the server is unreachable.
        if (!(error instanceof ProtocolError)) throw error;
        refused.set(uri, error);
      }
    }
    return refused;
  }

  async close(): Promise<void> {}
}

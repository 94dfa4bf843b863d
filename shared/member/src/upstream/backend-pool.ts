import { BrokerError, type BackendConfig, type Clock } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { BackendConnection, type BackendListener } from "./backend-connection.js";

/** All configured backends, connected and kept connected from `start()` until `close()`. */
export class BackendPool {
  private readonly connections = new Map<string, BackendConnection>();

  constructor(
    backends: readonly BackendConfig[],
    deps: { listener: BackendListener; logger: Logger; clock: Clock; clientInfo: { name: string; version: string } },
  ) {
    for (const config of backends) this.connections.set(config.id, new BackendConnection(config, deps));
  }

  start(): void {
    for (const connection of this.connections.values()) connection.start();
  }

  async close(): Promise<void> {
    await Promise.all([...this.connections.values()].map((c) => c.close()));
  }

  all(): BackendConnection[] {
    return [...this.connections.values()];
  }

  get(id: string): BackendConnection {
    const connection = this.connections.get(id);
    if (connection === undefined) throw new BrokerError("INTERNAL", `unknown backend '${id}'`);
    return connection;
  }

  /** Every backend is connected and answering (the `/readyz` condition). */
  ready(): boolean {
    return this.all().every((c) => c.readiness === "connected");
  }
}

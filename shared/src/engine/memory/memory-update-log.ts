import { CHANNEL, resourceUpdatedMessage, type BarrierMessage, type Bus } from "../bus.js";
import type { KeyStamp, UpdateLog, UpdateToPublish } from "../update-log.js";
import type { MemoryPositions } from "./memory-positions.js";

/** The update log of one process: positions from its counter, stamps in a map, messages on its bus. */
export class MemoryUpdateLog implements UpdateLog {
  private readonly stampsByKey = new Map<string, { updated: number; since: number; at?: number }>();

  constructor(
    private readonly bus: Bus,
    private readonly positions: MemoryPositions,
  ) {}

  async publish(update: UpdateToPublish, keys: readonly string[]): Promise<number> {
    const position = this.positions.next();
    for (const key of keys) {
      const stamp = this.stampsByKey.get(`${update.backendId}\u0000${key}`);
      if (stamp === undefined) continue;
      stamp.updated = position;
      stamp.at = update.at;
    }
    await Promise.all(keys.map((key) => this.bus.publish(CHANNEL.resource(update.backendId, key), resourceUpdatedMessage(update, key, keys.length, position))));
    return position;
  }

  async watched(backendId: string, key: string): Promise<void> {
    this.stampsByKey.set(`${backendId}\u0000${key}`, { updated: 0, since: await this.positions.current() });
  }

  async unwatched(backendId: string, key: string): Promise<void> {
    this.stampsByKey.delete(`${backendId}\u0000${key}`);
  }

  async stamps(backendId: string, keys: readonly string[]): Promise<KeyStamp[]> {
    return keys.map((key) => {
      const stamp = this.stampsByKey.get(`${backendId}\u0000${key}`);
      return stamp === undefined ? { updated: 0, since: undefined } : { updated: stamp.updated, since: stamp.since };
    });
  }

  async updatedAt(backendId: string, keys: readonly string[]): Promise<(number | undefined)[]> {
    return keys.map((key) => this.stampsByKey.get(`${backendId}\u0000${key}`)?.at);
  }

  current(): Promise<number> {
    return this.positions.current();
  }

  async reserve(mark?: { channel: string; message: Omit<BarrierMessage, "position"> }): Promise<number> {
    const position = this.positions.next();
    // Delivered in publish order, after what was published before.
    if (mark !== undefined) await this.bus.publish(mark.channel, { ...mark.message, position });
    return position;
  }

  /** One process's counter is never lost. */
  async lostUpTo(): Promise<number> {
    return 0;
  }

  async raiseTo(position: number): Promise<void> {
    this.positions.raiseTo(position);
  }
}

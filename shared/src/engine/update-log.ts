import type { BarrierMessage, ResourceUpdatedMessage } from "./bus.js";

/** A backend update as the watcher publishes it: one message per key it falls under, positions assigned by the log. */
export type UpdateToPublish = Omit<ResourceUpdatedMessage, "position" | "key" | "keys">;

/** What the log knows of one (backend, key) for resumption. */
export interface KeyStamp {
  /** Position of the key's last update since its watch began (0: none). */
  updated: number;
  /** Position at which the current watch of the key began; undefined: not watched (nothing known). */
  since: number | undefined;
}

/**
 * Backend updates in the cluster's order. Each update gets the next cluster position (the counter
 * catalog changes take theirs from too) and is published on the channel of each key it falls
 * under, in one step with recording the position as the key's stamp: one write per backend
 * update, none per delivery. Any member can then tell, for a client that last saw position P,
 * which of its subscribed keys were updated after P.
 *
 * Delivery: as the bus's (at-most-once per subscribed process, in publish order per channel), and
 * positions increase in the order messages are delivered on any one subscriber connection.
 */
export interface UpdateLog {
  /** Publishes `update` under each of `keys` (the URI and its subscribed ancestors); resolves with its position. */
  publish(update: UpdateToPublish, keys: readonly string[]): Promise<number>;
  /** The watch of (backend, key) starts now: what happened to it before is unknown. */
  watched(backendId: string, key: string): Promise<void>;
  /** Nobody watches (backend, key) anymore: its stamps go. */
  unwatched(backendId: string, key: string): Promise<void>;
  stamps(backendId: string, keys: readonly string[]): Promise<KeyStamp[]>;
  /** When each of `keys` was last updated (the update's `at`, epoch ms), while it is watched; undefined: not since its watch began. */
  updatedAt(backendId: string, keys: readonly string[]): Promise<(number | undefined)[]>;
  /** The newest position handed out. */
  current(): Promise<number>;
  /**
   * Hands out the next position to no update: a point in the cluster's order that a client's
   * cursor can name (a listen's acknowledgement, a resumption's announcements). Every update
   * published after it has a larger position, and a watch that starts after it a `since` at least
   * as large; a watch that had started before it has a smaller `since`. With `mark`, publishes
   * `mark.message` with that position on `mark.channel` in the same step: a subscriber gets it
   * after every message published before the position was handed out, and before every message
   * published after.
   */
  reserve(mark?: { channel: string; message: Omit<BarrierMessage, "position"> }): Promise<number>;
  /**
   * Redis lost the counter: positions go on from at least `position` (what clients saw before must
   * still come before whatever is handed out next), and positions up to it may have been handed
   * out twice meanwhile (see `lostUpTo`).
   */
  raiseTo(position: number): Promise<void>;
  /**
   * The highest position that may have been handed out twice (Redis lost the counter, and it went
   * on from below what clients had seen until the members raised it): a client's cursor at or below
   * it cannot be resumed exactly. 0: none.
   */
  lostUpTo(): Promise<number>;
}

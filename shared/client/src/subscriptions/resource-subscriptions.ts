import { SerialQueue } from "../util/serial-queue.js";
import type { SubscriptionChannel } from "./subscription-channel.js";

/**
 * `subscribing`: asked for, the server has not answered yet (not in the set, but its updates are
 * heard). `active`: the server delivers updates. `pending`: refused on a resubscribe, retried.
 */
type SubscriptionStatus = "subscribing" | "active" | "pending";

/** The subscribed URIs, and those of them still waiting to be re-established. */
export interface SubscriptionSet {
  readonly uris: readonly string[];
  readonly pending: readonly string[];
}

/**
 * The subscribed resource URIs, kept in step with the server through the channel of the current
 * connection. Adds, removes, restores and retries run one at a time in call order, so the set and
 * the server's view never diverge by interleaving.
 *
 * Contracts: `add` puts the URI in the set only after the server accepted, but `covers` it from
 * before the request, so that an update the server sends before its answer (or on a new listen
 * stream before the old one is gone) is not lost; a refusal rolls that back. `remove` always takes
 * the URI out (the server call's error, if any, is still thrown), and asks the server only when
 * the set was restored on that channel. A URI the server refuses on `restore` stays in the set
 * as pending until a `retryPending` gets it accepted (after a reconnect the server may not know it
 * yet, e.g. a broker whose backend is still starting); so does one the channel reports it no
 * longer serves (`markPending`). `onChange` hears every change of membership or status.
 */
export class ResourceSubscriptions {
  private readonly uris = new Map<string, SubscriptionStatus>();
  private readonly queue = new SerialQueue();
  /** Bumped by `clear()`: an add that was under way when the set was cleared does not land. */
  private generation = 0;
  /** The channel the set was last restored on: the one whose server side holds it. */
  private established: SubscriptionChannel | undefined;

  constructor(private readonly onChange: (set: SubscriptionSet) => void) {}

  /** The subscribed URIs (pending ones included), in subscription order. */
  list(): string[] {
    return [...this.uris].filter(([, status]) => status !== "subscribing").map(([uri]) => uri);
  }

  active(): string[] {
    return this.withStatus("active");
  }

  pending(): string[] {
    return this.withStatus("pending");
  }

  has(uri: string): boolean {
    const status = this.uris.get(uri);
    return status !== undefined && status !== "subscribing";
  }

  /** Whether an update for `uri` is one of ours: a subscribed (or subscribing) URI or a sub-resource of one. */
  covers(uri: string): boolean {
    if (this.uris.has(uri)) return true;
    for (const subscribed of this.uris.keys()) {
      if (uri.startsWith(subscribed.endsWith("/") ? subscribed : `${subscribed}/`)) return true;
    }
    return false;
  }

  /** `channel` is looked up when the add runs (it throws when there is no usable connection). */
  add(uri: string, channel: () => SubscriptionChannel): Promise<void> {
    return this.queue.run(async () => {
      if (this.uris.has(uri)) return;
      const generation = this.generation;
      const target = channel();
      const current = this.active();
      this.uris.set(uri, "subscribing");
      try {
        await target.add(uri, current);
      } catch (error) {
        if (generation === this.generation) this.uris.delete(uri);
        throw error;
      }
      if (generation !== this.generation) return;
      this.uris.set(uri, "active");
      this.changed();
    });
  }

  /** `channel` is undefined while there is no usable connection: then only the set changes. */
  remove(uri: string, channel: () => SubscriptionChannel | undefined): Promise<void> {
    return this.queue.run(async () => {
      const status = this.uris.get(uri);
      if (status === undefined) return;
      this.uris.delete(uri);
      this.changed();
      const target = channel();
      if (status === "active" && target !== undefined && target === this.established) await target.remove(uri, this.active());
    });
  }

  /**
   * Re-establishes the whole set on a fresh connection's channel, which becomes the one removes
   * and retries go to. Resolves with the URIs the server refused (now pending) and why.
   */
  restore(channel: SubscriptionChannel): Promise<Map<string, unknown>> {
    return this.queue.run(async () => {
      this.established = undefined;
      const refused = await channel.restore(this.list());
      this.established = channel;
      let changed = false;
      for (const [uri, status] of this.uris) {
        const next = refused.has(uri) ? "pending" : "active";
        changed ||= next !== status;
        this.uris.set(uri, next);
      }
      if (changed) this.changed();
      return refused;
    });
  }

  /**
   * Tries each pending URI again on `channel` (if the set was restored on it). Resolves with
   * those now active and those still refused.
   */
  retryPending(channel: SubscriptionChannel): Promise<{ activated: string[]; refused: Map<string, unknown> }> {
    return this.queue.run(async () => {
      const activated: string[] = [];
      const refused = new Map<string, unknown>();
      if (channel !== this.established) return { activated, refused };
      for (const uri of this.pending()) {
        try {
          await channel.add(uri, this.active());
        } catch (error) {
          refused.set(uri, error);
          continue;
        }
        // Removed or cleared meanwhile: nothing to activate.
        if (this.uris.get(uri) !== "pending") continue;
        this.uris.set(uri, "active");
        activated.push(uri);
      }
      if (activated.length > 0) this.changed();
      return { activated, refused };
    });
  }

  /**
   * The server stopped honoring `uris` on `channel` outside a call about them (a reopened listen
   * stream): those still active become pending, if the set was restored on that channel. Runs at
   * once, not queued — it records what the channel already did. Returns the URIs it made pending.
   */
  markPending(channel: SubscriptionChannel, uris: readonly string[]): string[] {
    if (channel !== this.established) return [];
    const marked = uris.filter((uri) => this.uris.get(uri) === "active");
    for (const uri of marked) this.uris.set(uri, "pending");
    if (marked.length > 0) this.changed();
    return marked;
  }

  /** Empties the set at once (disconnect), without contacting the server. */
  clear(): void {
    this.generation++;
    this.established = undefined;
    const hadMembers = this.list().length > 0;
    this.uris.clear();
    if (hadMembers) this.changed();
  }

  private withStatus(status: SubscriptionStatus): string[] {
    return [...this.uris].filter(([, s]) => s === status).map(([uri]) => uri);
  }

  private changed(): void {
    this.onChange({ uris: this.list(), pending: this.pending() });
  }
}

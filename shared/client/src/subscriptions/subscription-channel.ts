/**
 * How one connection carries resource subscriptions to the server: `resources/subscribe` per URI
 * on a legacy connection (`LegacySubscriptionChannel`), one `subscriptions/listen` stream whose
 * filter mirrors the whole set on a modern one (`ListenStream`). Callers serialize the calls.
 *
 * A listen stream asks for the whole set at each opening, so the server may stop honoring a URI
 * outside any call about it (a reopened stream, another URI's add or remove): the stream then
 * leaves it out and reports it to its connection, which tells the owner of the set.
 */
export interface SubscriptionChannel {
  /**
   * Makes the server send updates for `uri` besides those of `current` (which excludes `uri`).
   * Rejects, leaving the server side as it was for `current`, when the server refuses: with its
   * JSON-RPC error, or SUBSCRIPTION_REFUSED when it answered but left `uri` out. (A listen stream
   * drops a URI of `current` that the server no longer honors, and reports it; see below.)
   */
  add(uri: string, current: readonly string[]): Promise<void>;
  /**
   * Stops the updates for `uri`; `remaining` is the set without it. Even when the server call
   * fails (the error is thrown) the channel no longer asks for `uri`: no later reopening includes
   * it. Updates for it may still arrive until then; the caller ignores them.
   */
  remove(uri: string, remaining: readonly string[]): Promise<void>;
  /**
   * Establishes `uris` on a fresh connection (with an empty list too: a listen stream also carries
   * the list-change notifications). Resolves with the URIs the server refused, and why; rejects
   * only when the server could not be asked at all (no answer), never for a refusal.
   */
  restore(uris: readonly string[]): Promise<Map<string, unknown>>;
  /**
   * Whether the last `restore` resumed exactly where the previous connection left off (a listen
   * stream the server resumed from its cursor: it sends what changed in between); false when
   * notifications may have been missed.
   */
  readonly resumedExactly?: boolean;
  /** Stops everything this channel started; idempotent. */
  close(): Promise<void>;
}

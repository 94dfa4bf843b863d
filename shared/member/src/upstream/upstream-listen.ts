import { ProtocolError, type McpSubscription, type SubscriptionFilter } from "@modelcontextprotocol/client";
import { BrokerError, type Clock, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { backoffDelay, type BackoffPolicy } from "@mcp-broker/shared";

export type ListenFlags = Pick<SubscriptionFilter, "toolsListChanged" | "promptsListChanged" | "resourcesListChanged">;

/** What a reopened stream may have missed while its predecessor was down. */
export interface ListenGap {
  /** List changes: a stream was lost since the last gap was reported. */
  readonly lists: boolean;
  /** URIs a lost stream carried that this stream honors again: each counts as updated once. */
  readonly uris: readonly string[];
}

export interface UpstreamListenDeps {
  backendId: string;
  /** Opens one `subscriptions/listen` and resolves once the backend acknowledged it. */
  open(filter: SubscriptionFilter): Promise<McpSubscription>;
  /** The list-change notifications to ask for (those the backend advertises). */
  flags: ListenFlags;
  clock: Clock;
  logger: Logger;
  /** Delays between attempts after the stream failed or was ended by the backend. */
  policy: BackoffPolicy;
  /**
   * A stream is open again after a lost one: whatever changed in between was not announced to us.
   * Fires once per lost stream with `lists`, and once per URI the lost stream carried, when a stream
   * honors that URI again (possibly later, if the first reopen left it out).
   */
  onGap(gap: ListenGap): void;
  /** How long changes to the wanted set are gathered into one reopen. */
  coalesceMs?: number;
}

interface Waiter {
  resolve(): void;
  reject(error: Error): void;
}

interface OpenStream {
  readonly subscription: McpSubscription;
  /** Resource URIs this member asked for. */
  readonly requested: ReadonlySet<string>;
  /** Resource URIs the backend acknowledged. */
  readonly honored: ReadonlySet<string>;
  readonly openedAt: number;
}

const DEFAULT_COALESCE_MS = 5;

/**
 * The one upstream `subscriptions/listen` stream of a modern backend connection; its filter is the
 * list-change flags plus the wanted resource URIs.
 *
 * - Changes to the wanted set are gathered for `coalesceMs`; at most one listen request is in
 *   flight, and exactly one more follows it when the wanted set changed meanwhile.
 * - `add(uri)` resolves only once an open stream's acknowledged filter holds the URI. It rejects
 *   (and forgets the URI) when the backend refuses the listen, leaves the URI out of its
 *   acknowledgement, or the connection ends.
 * - No gap: an older stream is closed only once a newer one covers every wanted URI it carried, so
 *   an update may arrive twice (harmless) but is not lost to a reopen.
 * - A stream the backend ends, gracefully or not, is reopened with backoff; once one is open again,
 *   `onGap` fires for the lists and for the lost URIs it honors; a lost URI it leaves out stays
 *   owed a catch-up until a later stream honors it (or nobody wants it). `downFor` tells the
 *   health check how long no stream has been open while one is needed.
 */
export class UpstreamListen {
  private readonly wanted = new Set<string>();
  private readonly waiters = new Map<string, Waiter[]>();
  /** Open streams, oldest first; the last one is the newest. */
  private streams: OpenStream[] = [];
  private timer: { handle: TimerHandle; kind: "coalesce" | "retry" } | undefined;
  private inFlight = false;
  private changedInFlight = false;
  private attempt = 0;
  private downSince: number | undefined;
  /** A stream was lost and no stream has opened since: list changes may have been missed. */
  private listsLost = false;
  /** Wanted URIs a lost stream carried and no open stream has honored since: owed one catch-up `updated`. */
  private readonly catchUp = new Set<string>();
  private disposed = false;
  private readonly coalesceMs: number;
  /** Whether the list-change flags alone keep a stream open: until the backend declines them all. */
  private flagsWanted: boolean;

  constructor(private readonly deps: UpstreamListenDeps) {
    this.coalesceMs = deps.coalesceMs ?? DEFAULT_COALESCE_MS;
    this.flagsWanted = Object.keys(this.filterFor([])).length > 0;
  }

  /** Opens the stream if the flags alone already need one. */
  start(): void {
    if (this.needsStream()) this.schedule("coalesce");
  }

  /** Adds `uri` to the filter; resolves once an open stream honors it. */
  add(uri: string): Promise<void> {
    if (this.disposed) return Promise.reject(this.unavailable());
    this.wanted.add(uri);
    if (!this.waiters.has(uri) && this.streams.some((s) => s.honored.has(uri))) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const list = this.waiters.get(uri) ?? [];
      list.push({ resolve, reject });
      this.waiters.set(uri, list);
      this.schedule("coalesce");
    });
  }

  /** Takes `uri` out of the filter (coalesced with other changes). */
  remove(uri: string): void {
    if (this.disposed || !this.wanted.delete(uri)) return;
    this.catchUp.delete(uri);
    this.settle(uri, new BrokerError("BACKEND_UNAVAILABLE", "The upstream subscription was withdrawn before the backend honored it.", { backend: this.deps.backendId }));
    this.schedule("coalesce");
  }

  /** How long no stream has been open although one is needed (0 when one is open or none is needed). */
  downFor(now: number): number {
    if (this.streams.length > 0 || !this.needsStream() || this.downSince === undefined) return 0;
    return Math.max(0, now - this.downSince);
  }

  /** The resource URIs each open upstream stream carries, oldest first (for the operator view and tests). */
  openStreams(): string[][] {
    return this.streams.map((s) => [...s.honored]);
  }

  /** A listen request is waiting for its acknowledgement. */
  get opening(): boolean {
    return this.inFlight;
  }

  /** Skips a pending backoff delay (the backend answered a health probe, so try now). */
  retryNow(): void {
    if (this.timer?.kind === "retry") {
      this.deps.clock.clearTimeout(this.timer.handle);
      this.timer = undefined;
    }
    if (this.needsReopen()) this.schedule("coalesce");
  }

  /** Closes every stream; pending `add`s reject. Idempotent. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer.handle);
    this.timer = undefined;
    for (const uri of [...this.waiters.keys()]) this.settle(uri, this.unavailable());
    const streams = this.streams;
    this.streams = [];
    await Promise.all(streams.map((s) => s.subscription.close().catch(() => undefined)));
  }

  private schedule(kind: "coalesce" | "retry"): void {
    if (this.disposed) return;
    this.trackDowntime();
    if (this.inFlight) {
      this.changedInFlight = true;
      return;
    }
    if (this.timer !== undefined) {
      // A change does not wait out a backoff delay: its caller is waiting for an answer.
      if (this.timer.kind === "coalesce" || kind === "retry") return;
      this.deps.clock.clearTimeout(this.timer.handle);
    }
    const delay = kind === "coalesce" ? this.coalesceMs : backoffDelay(this.deps.policy, this.attempt++);
    const handle = this.deps.clock.setTimeout(() => {
      this.timer = undefined;
      void this.reopen();
    }, delay);
    handle.unref?.();
    this.timer = { handle, kind };
  }

  private async reopen(): Promise<void> {
    if (this.disposed || this.inFlight) return;
    if (!this.needsStream()) {
      this.closeStreams(this.streams);
      this.streams = [];
      this.trackDowntime();
      return;
    }
    if (!this.needsReopen()) {
      this.retireCovered();
      return;
    }
    const uris = [...this.wanted];
    this.inFlight = true;
    this.changedInFlight = false;
    let subscription: McpSubscription;
    try {
      subscription = await this.deps.open(this.filterFor(uris));
    } catch (error) {
      this.inFlight = false;
      if (!this.disposed) this.failed(uris, error);
      return;
    }
    this.inFlight = false;
    if (this.disposed) {
      await subscription.close().catch(() => undefined);
      return;
    }
    const honoredFilter = subscription.honoredFilter;
    const stream: OpenStream = { subscription, requested: new Set(uris), honored: new Set(honoredFilter.resourceSubscriptions ?? []), openedAt: this.deps.clock.now() };
    // A backend that honors none of the flags it advertised would otherwise have a flags-only
    // stream reopened (and counted as down) forever.
    if (this.flagsWanted && honoredFilter.toolsListChanged !== true && honoredFilter.promptsListChanged !== true && honoredFilter.resourcesListChanged !== true) {
      this.flagsWanted = false;
      this.deps.logger.warn({ backend: this.deps.backendId }, "backend honors no list-change notifications on subscriptions/listen");
    }
    this.streams.push(stream);
    this.deps.logger.debug({ backend: this.deps.backendId, uris: stream.honored.size, wanted: this.wanted.size, open: this.streams.length }, "upstream listen stream opened");
    void subscription.closed.then((how) => this.onClosed(stream, how));
    this.trackDowntime();
    const requested = new Set(uris);
    for (const uri of [...this.waiters.keys()]) {
      if (stream.honored.has(uri)) this.settle(uri);
      else if (requested.has(uri)) {
        this.wanted.delete(uri);
        this.settle(uri, new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.deps.backendId}' did not accept the subscription; retry later.`, { backend: this.deps.backendId }));
      }
    }
    this.retireCovered();
    this.reportGap(stream);
    // New changes go at once; URIs an earlier stream carried but this one left out are retried with backoff.
    if (this.changedInFlight) this.schedule("coalesce");
    else if (this.needsReopen()) this.schedule("retry");
  }

  private failed(uris: string[], error: unknown): void {
    this.deps.logger.warn({ backend: this.deps.backendId, uris: uris.length, err: (error as Error).message }, "subscriptions/listen failed");
    const named = refusedUri(error);
    if (named !== undefined && uris.includes(named) && this.wanted.delete(named)) {
      // The backend named the URI it refuses: drop that one and try the others at once.
      this.settle(named, this.refusal(error));
      this.schedule("coalesce");
      return;
    }
    // A new subscription fails with the listen; those already honored stay wanted and are retried.
    for (const uri of uris) {
      if (!this.waiters.has(uri)) continue;
      this.wanted.delete(uri);
      this.settle(uri, this.refusal(error));
    }
    this.trackDowntime();
    if (this.changedInFlight) this.schedule("coalesce");
    else if (this.needsReopen()) this.schedule("retry");
  }

  private onClosed(stream: OpenStream, how: "local" | "graceful" | "remote"): void {
    const index = this.streams.indexOf(stream);
    // Not ours any more: retired, or closed by dispose.
    if (index < 0 || this.disposed) return;
    this.streams.splice(index, 1);
    // An older stream whose URIs the newest one carries anyway loses nothing.
    if (how === "local" || !this.needsReopen()) return;
    const now = this.deps.clock.now();
    this.deps.logger.info({ backend: this.deps.backendId, how, uris: stream.honored.size }, "upstream listen stream ended by the backend; reopening");
    // A stream that lived long was healthy: start the backoff over. One closed at once keeps backing off.
    if (now - stream.openedAt >= this.deps.policy.maxDelayMs) this.attempt = 0;
    this.listsLost = true;
    for (const uri of stream.honored) {
      if (this.wanted.has(uri) && !this.streams.some((s) => s.honored.has(uri))) this.catchUp.add(uri);
    }
    this.schedule("retry");
  }

  /** After `stream` opened: the catch-ups it settles (lists once per loss, each lost URI it honors). */
  private reportGap(stream: OpenStream): void {
    const uris: string[] = [];
    for (const uri of this.catchUp) {
      if (!this.wanted.has(uri)) this.catchUp.delete(uri);
      else if (stream.honored.has(uri)) {
        this.catchUp.delete(uri);
        uris.push(uri);
      }
    }
    if (!this.listsLost && uris.length === 0) return;
    const lists = this.listsLost;
    this.listsLost = false;
    this.deps.onGap({ lists, uris });
  }

  /** The wanted filter is not exactly what the newest stream honors. */
  private needsReopen(): boolean {
    if (!this.needsStream()) return this.streams.length > 0;
    const newest = this.streams.at(-1);
    if (newest === undefined) return true;
    for (const uri of this.wanted) if (!newest.honored.has(uri)) return true;
    // It carries a URI this member asked for and wants no longer: a narrower stream replaces it.
    // What the backend honored unasked does not count: it honors it again on every reopen, and
    // comparing sizes reopened the stream forever.
    for (const uri of newest.requested) if (!this.wanted.has(uri) && newest.honored.has(uri)) return true;
    return false;
  }

  private needsStream(): boolean {
    return this.flagsWanted || this.wanted.size > 0;
  }

  /** Downtime runs from the moment a stream is needed and none is open, until one is or none is needed. */
  private trackDowntime(): void {
    if (this.streams.length > 0 || !this.needsStream()) this.downSince = undefined;
    else this.downSince ??= this.deps.clock.now();
  }

  /** Closes older streams whose wanted URIs the newest one carries too. */
  private retireCovered(): void {
    const newest = this.streams.at(-1);
    if (newest === undefined) return;
    const covered = (s: OpenStream): boolean => s !== newest && [...s.honored].every((uri) => !this.wanted.has(uri) || newest.honored.has(uri));
    const retired = this.streams.filter(covered);
    if (retired.length === 0) return;
    this.streams = this.streams.filter((s) => !covered(s));
    this.closeStreams(retired);
  }

  private closeStreams(streams: OpenStream[]): void {
    if (streams.length > 0) this.deps.logger.debug({ backend: this.deps.backendId, closed: streams.length, open: this.streams.length }, "upstream listen streams retired");
    for (const s of streams) void s.subscription.close().catch(() => undefined);
  }

  private filterFor(uris: string[]): SubscriptionFilter {
    const filter: SubscriptionFilter = {};
    if (this.deps.flags.toolsListChanged === true) filter.toolsListChanged = true;
    if (this.deps.flags.promptsListChanged === true) filter.promptsListChanged = true;
    if (this.deps.flags.resourcesListChanged === true) filter.resourcesListChanged = true;
    if (uris.length > 0) filter.resourceSubscriptions = uris;
    return filter;
  }

  /** Resolves (no error) or rejects every waiter of `uri`. */
  private settle(uri: string, error?: Error): void {
    const list = this.waiters.get(uri);
    if (list === undefined) return;
    this.waiters.delete(uri);
    for (const waiter of list) {
      if (error === undefined) waiter.resolve();
      else waiter.reject(error);
    }
  }

  private refusal(error: unknown): Error {
    if (error instanceof BrokerError) return error;
    const reason = error instanceof Error ? error.message : String(error);
    return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.deps.backendId}' refused subscriptions/listen (${reason}); retry later.`, { backend: this.deps.backendId }, { cause: error });
  }

  private unavailable(): BrokerError {
    return new BrokerError("BACKEND_UNAVAILABLE", `Backend '${this.deps.backendId}' is not connected; retry later.`, { backend: this.deps.backendId });
  }
}

/** The URI a backend names when it refuses a listen for one resource (`data.uri`, as PROTOCOL.md specifies). */
function refusedUri(error: unknown): string | undefined {
  if (!(error instanceof ProtocolError)) return undefined;
  const data = error.data as { uri?: unknown } | undefined;
  return typeof data?.uri === "string" ? data.uri : undefined;
}

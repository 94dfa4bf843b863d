import { createHash } from "node:crypto";
import type { ServerCapabilities } from "@modelcontextprotocol/client";
import {
  BrokerError,
  MAX_TIMER_MS,
  type BackendConfig,
  type Clock,
  type SubscriptionRegistry,
  type UpdateLog,
  type TimerHandle,
  ancestorsOf,
} from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import type { BackendEra, BackendState } from "./backend-connection.js";
import { backoffDelay } from "@mcp-broker/shared";

/** How one (backend, URI) is watched upstream. */
type Mode = "subscribe" | "listen" | "poll";

interface PollState {
  timer: TimerHandle | undefined;
  hash: string | undefined;
  stopped: boolean;
}

interface Watch {
  mode: Mode;
  poll?: PollState;
  /**
   * An update of its URI was published since the watch began (a real one, or the announcement of a
   * re-subscribe): a re-subscribe need not announce it (again), since that update told every
   * subscriber of everything before it.
   */
  heard?: boolean;
}

/**
 * One (backend, URI): its established watch and the upstream operations on it. The operations run
 * one after another, so the backend ends in the state the last one asked for (a subscribe never
 * overtakes an unsubscribe) and a release that arrives during a subscribe takes effect after it.
 */
interface Slot {
  readonly backendId: string;
  readonly uri: string;
  watch: Watch | undefined;
  /** Tail of the operation chain; never rejects. */
  tail: Promise<void>;
  /** Operations queued or running. */
  ops: number;
  /** The watch operation at the tail of the chain, which concurrent `ensure`s share. */
  joinable: Promise<void> | undefined;
  grace: TimerHandle | undefined;
}

/** Re-subscriptions after a reconnect that failed and wait for their next attempt. */
interface RetryState {
  readonly epoch: number;
  attempt: number;
  timer: TimerHandle | undefined;
  readonly uris: Set<string>;
  /** `registry.wanted` itself failed: the next attempt starts from the whole wanted set. */
  all: boolean;
}

/** What the watcher uses of one backend connection (`BackendConnection` is one). */
export interface WatchedBackend {
  readonly id: string;
  readonly state: BackendState;
  readonly era: BackendEra | undefined;
  readonly capabilities: ServerCapabilities | undefined;
  readonly config: Pick<BackendConfig, "pollIntervalMs" | "reconnect">;
  request(method: string, params: Record<string, unknown> | undefined): Promise<Record<string, unknown>>;
  watchListen(uri: string): Promise<void>;
  unwatchListen(uri: string): void;
}

/** The backends by id (`BackendPool` is one). */
export interface WatchedBackends {
  get(id: string): WatchedBackend;
}

/** What the subscribe orchestration needs from the upstream side. */
export interface UpstreamPort {
  /**
   * Resolves once (backend, uri) is watched upstream (for a modern backend: once an upstream listen
   * stream's acknowledgement honors it); rejects with a `BrokerError` when the backend is down or
   * refuses. Idempotent; concurrent calls share one attempt.
   */
  ensure(backendId: string, uri: string): Promise<void>;
  /**
   * Whether `ensure` has nothing to do for (backend, uri) right now: watched upstream by this
   * member, nothing queued on it and no release pending. A synchronous look, so that a listen of
   * many held URIs does not make a promise for each (optional: absent means always `ensure`).
   */
  watching?(backendId: string, uri: string): boolean;
  /**
   * The cluster-wide count for (backend, uri) reached zero: unwatch after the grace period, once any
   * operation on it in flight has finished, unless someone wants it again by then.
   */
  release(backendId: string, uri: string): void;
}

const MIN_POLL_MS = 1_000;
/** Subscribe requests (or first polls) one re-subscribe after a reconnect keeps in flight. */
const RESUBSCRIBE_CONCURRENCY = 64;
/**
 * Releases (the subscriber-count check and the upstream unsubscribe) one backend runs at a time,
 * and the unsubscribes of a member that stops watching it.
 * Releases come due together when many clients leave at once (their grace periods end together):
 * unbounded, 8 000 of them saturated a broker long enough for it to miss renewing its watcher lease
 * (bench scenario 5), and the takeover that followed re-subscribed everything on another member.
 */
const RELEASE_CONCURRENCY = 64;
/**
 * Updates published and not yet acknowledged (by Redis) at which this member stops reading its
 * backends' update streams, until no more than `BACKLOG_LOW` are left. Without the limit a backend
 * sending faster than this member could publish filled its memory and event loop instead of its
 * socket: at 20 000 updates/s on a 2-core machine the watcher stalled past its lease TTL, and the
 * takeover that followed cost the updates in between.
 */
const BACKLOG_HIGH = 2_000;
const BACKLOG_LOW = 500;
/** The first and the longest wait before an update whose publish failed is published again (see `republishLater`). */
const REPUBLISH_MIN_MS = 250;
const REPUBLISH_MAX_MS = 5_000;

/**
 * The watcher role: one upstream subscription per (backend, URI) while anyone wants it.
 * Legacy backends get `resources/subscribe`; modern backends one `subscriptions/listen` stream whose
 * filter is the wanted set; backends that cannot push are polled and an update is emitted when the
 * content hash changes. After a reconnect every wanted URI is watched again, and those that fail
 * are retried with the backend's backoff until they succeed, the backend drops again, or nobody
 * wants them. Updates are published on the bus, once per matching subscription key (the URI itself
 * or an ancestor of it).
 */
export class UpstreamSubscriptions implements UpstreamPort {
  /** Numbers each backend update this instance publishes (see the bus message's `update`). */
  private updates = 0;
  private readonly slots = new Map<string, SlotMap>();
  /** Bumped on every disconnect: an operation that spans one must not record its result. */
  private readonly epochs = new Map<string, number>();
  private readonly retries = new Map<string, RetryState>();
  /** Updates handed to the update log and not yet settled. */
  private publishing = 0;
  /** Resolves once `publishing` is down to `BACKLOG_LOW` (while it is above `BACKLOG_HIGH`, or was). */
  private drained: { promise: Promise<void>; resolve(): void } | undefined;
  /** Each backend's releases, `RELEASE_CONCURRENCY` at a time. */
  private readonly releases = new Map<string, Limiter>();
  private backends: WatchedBackends | undefined;
  private closed = false;
  /** Updates whose publish failed, to publish again: per backend, the URI and its latest params. */
  private readonly unpublishedUpdates = new Map<string, Map<string, Record<string, unknown> | undefined>>();
  private republishTimer: TimerHandle | undefined;
  private republishDelay = REPUBLISH_MIN_MS;

  constructor(
    private readonly deps: {
      registry: SubscriptionRegistry;
      /** Where updates go out, each at its cluster position, and where the watched keys are stamped. */
      updates: UpdateLog;
      clock: Clock;
      logger: Logger;
      instanceId: string;
      releaseGraceMs: number;
      pollIntervalMs: number;
      /**
       * An update the log could not publish (Redis away, or refusing commands): it still reaches
       * this member's own subscribers; it is published again until that gets through (see `republishLater`).
       */
      unpublished?: (backendId: string, keys: readonly string[], uri: string, params: Record<string, unknown> | undefined) => void;
      /** Each update this member publishes, for the operator console's live feed (see `ConsoleFeedTap`). */
      published?: (backendId: string, uri: string, at: number) => void;
    },
  ) {}

  attach(backends: WatchedBackends): void {
    this.backends = backends;
  }

  watching(backendId: string, uri: string): boolean {
    const slot = this.slots.get(backendId)?.get(uri);
    return slot !== undefined && slot.ops === 0 && slot.watch !== undefined && slot.grace === undefined;
  }

  ensure(backendId: string, uri: string): Promise<void> {
    const slot = this.slot(backendId, uri);
    this.cancelGrace(slot);
    return this.watchInOrder(slot);
  }

  release(backendId: string, uri: string): void {
    const slot = this.slot(backendId, uri);
    if (slot.grace !== undefined) return;
    const timer = this.deps.clock.setTimeout(() => {
      slot.grace = undefined;
      this.unwatchInOrder(slot);
    }, this.deps.releaseGraceMs);
    timer.unref?.();
    slot.grace = timer;
  }

  /** Backend updates of watched resources received since start (for metrics). */
  updatesReceived(): number {
    return this.updates;
  }

  /** URIs of a backend currently watched upstream (for tests and the operator view). */
  watched(backendId: string): string[] {
    return [...(this.slots.get(backendId)?.values() ?? [])].filter((slot) => slot.watch !== undefined).map((slot) => slot.uri);
  }

  /** A backend (re)connected: everything wanted is watched again, without any client action. Never rejects. */
  async backendConnected(backend: { readonly id: string }): Promise<void> {
    const epoch = this.epoch(backend.id);
    let uris: string[];
    try {
      uris = await this.deps.registry.wanted(backend.id);
    } catch (error) {
      this.deps.logger.warn({ backend: backend.id, err: (error as Error).message }, "re-subscribe after reconnect: cannot read the wanted set");
      this.scheduleRetry(backend.id, epoch, [], true);
      return;
    }
    await this.resubscribe(backend.id, epoch, uris);
  }

  /** The upstream session is gone and so are its subscriptions. */
  backendDisconnected(backend: { readonly id: string }): void {
    this.epochs.set(backend.id, this.epoch(backend.id) + 1);
    const retry = this.retries.get(backend.id);
    if (retry?.timer !== undefined) this.deps.clock.clearTimeout(retry.timer);
    this.retries.delete(backend.id);
    for (const slot of [...(this.slots.get(backend.id)?.values() ?? [])]) {
      if (slot.watch?.poll !== undefined) this.stopPoll(slot.watch.poll);
      slot.watch = undefined;
      // A watch in flight fails (its epoch is gone); later ensures must not join it.
      slot.joinable = undefined;
      this.forgetIfIdle(slot);
    }
  }

  /**
   * Another instance watches the backend from now on (this one lost or gave up its lease): every
   * upstream watch here ends, so updates are not published twice.
   */
  relinquish(backendId: string): void {
    const dropped = [...(this.slots.get(backendId)?.values() ?? [])].flatMap((slot) => (slot.watch === undefined ? [] : [{ uri: slot.uri, mode: slot.watch.mode }]));
    this.backendDisconnected({ id: backendId });
    const backend = this.backends?.get(backendId);
    if (backend?.state !== "connected") return;
    const releases = this.releasesOf(backendId);
    for (const { uri, mode } of dropped) {
      if (mode === "listen") backend.unwatchListen(uri);
      if (mode !== "subscribe") continue;
      // As many as were watched, all at once: they take their turns like releases.
      void releases
        .run(() => backend.request("resources/unsubscribe", { uri }))
        .catch((error: unknown) => {
          this.deps.logger.warn({ backend: backendId, uri, err: (error as Error).message }, "upstream unsubscribe failed");
        });
    }
  }

  /**
   * Desired against actual: watches what the registry wants and is not watched (counting it as
   * updated once: its updates may have been missed) and releases what is watched and no longer
   * wanted. The watcher runs it periodically, which repairs watch requests and releases lost on
   * the way from other instances. Never rejects.
   */
  async reconcile(backendId: string): Promise<void> {
    const epoch = this.epoch(backendId);
    let wanted: string[];
    try {
      wanted = await this.deps.registry.wanted(backendId);
    } catch (error) {
      this.deps.logger.warn({ backend: backendId, err: (error as Error).message }, "reconcile: cannot read the wanted set");
      return;
    }
    const slots = this.slots.get(backendId);
    const wantedSet = new Set(wanted);
    for (const slot of [...(slots?.values() ?? [])]) {
      if (slot.watch !== undefined && slot.ops === 0 && !wantedSet.has(slot.uri)) this.release(backendId, slot.uri);
    }
    const missing = wanted.filter((uri) => {
      const slot = slots?.get(uri);
      return slot === undefined || (slot.watch === undefined && slot.ops === 0);
    });
    if (missing.length === 0) return;
    // The wanted set was read a while ago on a busy member: what was released since (its slot is
    // gone, so it looks missing) must not be subscribed again only to be released once more.
    let still: string[];
    try {
      still = await this.stillWanted(backendId, missing);
    } catch (error) {
      this.deps.logger.warn({ backend: backendId, err: (error as Error).message }, "reconcile: cannot re-check the subscriber counts");
      return;
    }
    if (still.length > 0) await this.resubscribe(backendId, epoch, still);
  }

  /**
   * An update from a backend: published once per watched key it falls under (itself and its
   * ancestors), all at one cluster position. This member's own sessions get it back from the bus
   * like every other member's, so every session sees updates in the cluster's order. `params`: what
   * the backend said besides the URI, passed on to clients (see `passedOnParams`).
   */
  resourceUpdated(backendId: string, uri: string, params?: Record<string, unknown>): void {
    const slots = this.slots.get(backendId);
    if (slots === undefined) return;
    const keys: string[] = [];
    for (const key of [uri, ...ancestorsOf(uri, (length) => slots.hasLength(length))]) {
      const watch = slots.get(key)?.watch;
      if (watch === undefined) continue;
      watch.heard = true;
      keys.push(key);
    }
    if (keys.length === 0) return;
    const update = ++this.updates;
    const at = this.deps.clock.now();
    this.deps.published?.(backendId, uri, at);
    this.publishing++;
    this.deps.updates.publish({ kind: "resource.updated", v: 1, origin: this.deps.instanceId, backendId, uri, params, at, update }, keys).then(
      () => {
        this.settled();
        this.republishDelay = REPUBLISH_MIN_MS;
      },
      (error: unknown) => {
        this.settled();
        this.deps.logger.warn({ backendId, uri, err: (error as Error).message }, "publish failed; delivered to this member's own sessions only, published again later");
        this.deps.unpublished?.(backendId, keys, uri, params);
        this.republishLater(backendId, uri, params);
      },
    );
  }

  /**
   * An update whose publish failed is published again, with backoff, until a publish gets through.
   * A dropped connection announces a gap anyway (see `updatesMissed`), but a command refused on a
   * live one (Redis out of memory, a script error) did not: the other members' sessions never heard
   * of that update. This member's own sessions had it delivered at once, and hear it a second time.
   */
  private republishLater(backendId: string, uri: string, params: Record<string, unknown> | undefined): void {
    if (this.closed) return;
    let uris = this.unpublishedUpdates.get(backendId);
    if (uris === undefined) {
      uris = new Map();
      this.unpublishedUpdates.set(backendId, uris);
    }
    uris.set(uri, params);
    if (this.republishTimer !== undefined) return;
    const delay = this.republishDelay;
    this.republishDelay = Math.min(REPUBLISH_MAX_MS, delay * 2);
    this.republishTimer = this.deps.clock.setTimeout(() => {
      this.republishTimer = undefined;
      const pending = [...this.unpublishedUpdates];
      this.unpublishedUpdates.clear();
      for (const [id, updates] of pending) for (const [again, lastParams] of updates) this.resourceUpdated(id, again, lastParams);
    }, delay);
    this.republishTimer.unref?.();
  }

  /** An update handed to the update log settled (one promise per update on this path, not three). */
  private settled(): void {
    this.publishing--;
    if (this.drained !== undefined && this.publishing <= BACKLOG_LOW) {
      this.drained.resolve();
      this.drained = undefined;
    }
  }

  /**
   * Whether reading more updates from the backends should wait: a promise that resolves once the
   * updates still being published are few again, or undefined when they are few already.
   */
  backlog(): Promise<void> | undefined {
    if (this.drained !== undefined) return this.drained.promise;
    if (this.publishing < BACKLOG_HIGH) return undefined;
    let resolve: () => void = () => undefined;
    const promise = new Promise<void>((done) => (resolve = done));
    this.drained = { promise, resolve };
    return promise;
  }

  /**
   * The backend's notifications may have been lost for a while (its notification or listen stream
   * was down): each of `uris` that is watched (every watched URI when undefined) counts as updated
   * once. An extra `updated` is harmless, a missed one is not. Polled URIs lose nothing to a gap in
   * the backend's notifications, so they are left alone.
   */
  updatesMissed(backendId: string, uris?: readonly string[]): void {
    const slots = this.slots.get(backendId);
    if (slots === undefined) return;
    for (const slot of uris === undefined ? [...slots.values()] : uris.flatMap((uri) => slots.get(uri) ?? [])) {
      if (slot.watch !== undefined && slot.watch.mode !== "poll") this.resourceUpdated(backendId, slot.uri);
    }
  }

  close(): void {
    this.closed = true;
    if (this.republishTimer !== undefined) this.deps.clock.clearTimeout(this.republishTimer);
    this.unpublishedUpdates.clear();
    for (const retry of this.retries.values()) if (retry.timer !== undefined) this.deps.clock.clearTimeout(retry.timer);
    this.retries.clear();
    for (const slots of this.slots.values()) {
      for (const slot of slots.values()) {
        this.cancelGrace(slot);
        if (slot.watch?.poll !== undefined) this.stopPoll(slot.watch.poll);
      }
    }
    this.slots.clear();
  }

  private slot(backendId: string, uri: string): Slot {
    let slots = this.slots.get(backendId);
    if (slots === undefined) {
      slots = new SlotMap();
      this.slots.set(backendId, slots);
    }
    let slot = slots.get(uri);
    if (slot === undefined) {
      slot = { backendId, uri, watch: undefined, tail: Promise.resolve(), ops: 0, joinable: undefined, grace: undefined };
      slots.set(uri, slot);
    }
    return slot;
  }

  private forgetIfIdle(slot: Slot): void {
    if (slot.ops > 0 || slot.watch !== undefined || slot.grace !== undefined) return;
    const slots = this.slots.get(slot.backendId);
    if (slots?.get(slot.uri) !== slot) return;
    slots.delete(slot.uri);
    if (slots.size === 0) this.slots.delete(slot.backendId);
  }

  private cancelGrace(slot: Slot): void {
    if (slot.grace === undefined) return;
    this.deps.clock.clearTimeout(slot.grace);
    slot.grace = undefined;
  }

  private epoch(backendId: string): number {
    return this.epochs.get(backendId) ?? 0;
  }

  /** Runs `op` after every operation queued on the slot before it. */
  private enqueue(slot: Slot, op: () => Promise<void>): Promise<void> {
    slot.ops++;
    const run = slot.tail.then(op);
    const done = (): void => {
      slot.ops--;
      this.forgetIfIdle(slot);
    };
    slot.tail = run.then(done, done);
    return run;
  }

  /** Resolves once the slot is watched, after whatever is queued on it; joins a watch already at the tail. */
  private watchInOrder(slot: Slot): Promise<void> {
    if (slot.ops === 0 && slot.watch !== undefined) return Promise.resolve();
    if (slot.joinable !== undefined) return slot.joinable;
    const attempt = this.enqueue(slot, () => this.watch(slot));
    slot.joinable = attempt;
    const settled = (): void => {
      if (slot.joinable === attempt) slot.joinable = undefined;
    };
    void attempt.then(settled, settled);
    return attempt;
  }

  private unwatchInOrder(slot: Slot): void {
    // Whoever ensures from now on waits for this unwatch, then watches again.
    slot.joinable = undefined;
    const releases = this.releasesOf(slot.backendId);
    this.enqueue(slot, () => releases.run(() => this.unwatchIfUnwanted(slot))).catch((error: unknown) => {
      this.deps.logger.warn({ backend: slot.backendId, uri: slot.uri, err: (error as Error).message }, "upstream release failed");
    });
  }

  private releasesOf(backendId: string): Limiter {
    let releases = this.releases.get(backendId);
    if (releases === undefined) {
      releases = new Limiter(RELEASE_CONCURRENCY);
      this.releases.set(backendId, releases);
    }
    return releases;
  }

  private connectedBackend(backendId: string): WatchedBackend {
    const backend = this.backends?.get(backendId);
    if (backend?.state !== "connected") {
      throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backendId}' is not connected; retry later.`, { backend: backendId });
    }
    return backend;
  }

  private async watch(slot: Slot): Promise<void> {
    if (slot.watch !== undefined) return;
    const backend = this.connectedBackend(slot.backendId);
    const epoch = this.epoch(slot.backendId);
    const mode = modeOf(backend);
    let watch: Watch;
    if (mode === "subscribe") {
      await backend.request("resources/subscribe", { uri: slot.uri });
      watch = { mode };
    } else if (mode === "listen") {
      await backend.watchListen(slot.uri);
      watch = { mode };
    } else {
      const poll: PollState = { timer: undefined, hash: undefined, stopped: false };
      watch = { mode, poll };
      await this.pollOnce(backend, slot.uri, poll);
    }
    if (epoch !== this.epoch(slot.backendId) || this.closed) {
      if (watch.poll !== undefined) this.stopPoll(watch.poll);
      // Still connected: this instance stopped watching the backend meanwhile (relinquish), so the
      // subscription just made is undone and the asker looks for the new watcher.
      if (backend.state === "connected" && !this.closed) {
        if (mode === "listen") backend.unwatchListen(slot.uri);
        if (mode === "subscribe") void backend.request("resources/unsubscribe", { uri: slot.uri }).catch(() => undefined);
        throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${slot.backendId}': its watcher changed while subscribing; retry.`, { backend: slot.backendId, watcherChanged: true });
      }
      throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${slot.backendId}' dropped while subscribing; retry later.`, { backend: slot.backendId });
    }
    slot.watch = watch;
    // Updates from here on are stamped for resumption; what came before this watch is unknown.
    void this.deps.updates.watched(slot.backendId, slot.uri).catch((error: unknown) => this.deps.logger.warn({ backend: slot.backendId, uri: slot.uri, err: (error as Error).message }, "cannot stamp the watch's start"));
    this.retries.get(slot.backendId)?.uris.delete(slot.uri);
    this.deps.logger.debug({ backend: slot.backendId, uri: slot.uri, mode }, "upstream subscription established");
    // Marked watched for the cluster, and in the same step: nobody may want it by now (its holder
    // left during the subscribe, or a re-subscribe read a stale wanted set); with no release
    // pending, nothing else would ever unwatch it.
    if ((await this.markWatchedCounting(slot)) === 0 && slot.grace === undefined) this.unwatchInOrder(slot);
  }

  private async unwatchIfUnwanted(slot: Slot): Promise<void> {
    const watch = slot.watch;
    if (watch === undefined) return;
    // Removes the mark that it is watched in one step with finding nobody subscribed: a subscribe
    // from then on is the first again, and asks for a watch (which waits for this unwatch).
    if (!(await this.deps.registry.unwatch(slot.backendId, slot.uri))) return;
    // A disconnect in the meantime cleared it already.
    if (slot.watch !== watch) return;
    slot.watch = undefined;
    this.deps.logger.debug({ backend: slot.backendId, uri: slot.uri, mode: watch.mode }, "upstream subscription released");
    void this.deps.updates.unwatched(slot.backendId, slot.uri).catch(() => undefined);
    if (watch.poll !== undefined) this.stopPoll(watch.poll);
    const backend = this.backends?.get(slot.backendId);
    if (backend?.state !== "connected") return;
    if (watch.mode === "subscribe") {
      await backend.request("resources/unsubscribe", { uri: slot.uri }).catch((error: unknown) => {
        this.deps.logger.warn({ backend: slot.backendId, uri: slot.uri, err: (error as Error).message }, "upstream unsubscribe failed");
      });
    } else if (watch.mode === "listen") {
      backend.unwatchListen(slot.uri);
    }
  }

  /**
   * Tells the cluster that (backend, uri) is watched upstream, so that later subscribes on other
   * members need not ask (see `AddOutcome.watched`). Sent before any release of it can be (on the
   * same connection, in order): the release check, which removes it, lands after it.
   */
  markWatched(backendId: string, uri: string): void {
    this.deps.registry.markWatched(backendId, uri).catch((error: unknown) => this.deps.logger.debug({ backend: backendId, uri, err: (error as Error).message }, "cannot mark the watch (later subscribes ask the watcher)"));
  }

  /**
   * Marks the watch (see `markWatched`) and returns the registry count read with it, or -1 when
   * that failed (then the watch is kept: a leak beats a loss; later subscribes ask the watcher).
   */
  private async markWatchedCounting(slot: Slot): Promise<number> {
    try {
      return await this.deps.registry.markWatched(slot.backendId, slot.uri);
    } catch (error) {
      this.deps.logger.warn({ backend: slot.backendId, uri: slot.uri, err: (error as Error).message }, "cannot mark the watch and re-check the subscriber count");
      return -1;
    }
  }

  /**
   * Watches `uris` again: all at once for a listen backend (its filter changes coalesce into one
   * reopen), a few at a time otherwise. Those that fail wait for a retry.
   */
  private async resubscribe(backendId: string, epoch: number, uris: readonly string[]): Promise<void> {
    const backend = this.backends?.get(backendId);
    if (backend?.state !== "connected" || epoch !== this.epoch(backendId)) return;
    const failed: string[] = [];
    const concurrency = modeOf(backend) === "listen" ? uris.length : RESUBSCRIBE_CONCURRENCY;
    await eachLimited(uris, concurrency, async (uri) => {
      try {
        const slot = this.slot(backendId, uri);
        await this.watchInOrder(slot);
        // What changed while the backend was away was not announced: count it as updated once,
        // unless an update was published since the watch began (one of a reconcile overlapping a
        // takeover's re-subscribe, or a real one after an ensure watched it first).
        if (slot.watch !== undefined && slot.watch.heard !== true) this.resourceUpdated(backendId, uri);
      } catch (error) {
        if (epoch !== this.epoch(backendId)) return;
        failed.push(uri);
        this.deps.logger.warn({ backend: backendId, uri, err: (error as Error).message }, "re-subscribe after reconnect failed; retrying");
      }
    });
    if (failed.length > 0) this.scheduleRetry(backendId, epoch, failed, false);
  }

  /** One timer per backend and capped exponential backoff (the backend's reconnect policy) across attempts. */
  private scheduleRetry(backendId: string, epoch: number, uris: readonly string[], all: boolean): void {
    if (epoch !== this.epoch(backendId)) return;
    let state = this.retries.get(backendId);
    if (state?.epoch !== epoch) {
      state = { epoch, attempt: 0, timer: undefined, uris: new Set(), all: false };
      this.retries.set(backendId, state);
    }
    for (const uri of uris) state.uris.add(uri);
    state.all ||= all;
    if (state.timer !== undefined) return;
    const policy = this.backends?.get(backendId).config.reconnect;
    if (policy === undefined) return;
    const retry = state;
    retry.timer = this.deps.clock.setTimeout(() => {
      retry.timer = undefined;
      void this.retry(backendId, retry);
    }, backoffDelay(policy, retry.attempt++));
    retry.timer.unref?.();
  }

  private async retry(backendId: string, state: RetryState): Promise<void> {
    if (this.retries.get(backendId) !== state || state.epoch !== this.epoch(backendId)) return;
    const all = state.all;
    const candidates = [...state.uris];
    state.uris.clear();
    state.all = false;
    let uris: string[];
    try {
      uris = all ? await this.deps.registry.wanted(backendId) : await this.stillWanted(backendId, candidates);
    } catch (error) {
      this.deps.logger.warn({ backend: backendId, err: (error as Error).message }, "re-subscribe retry: cannot read the registry");
      this.scheduleRetry(backendId, state.epoch, candidates, all);
      return;
    }
    await this.resubscribe(backendId, state.epoch, uris);
    // Everything is watched (or unwanted): the next failure starts the backoff over.
    if (this.retries.get(backendId) === state && state.timer === undefined && state.uris.size === 0 && !state.all) this.retries.delete(backendId);
  }

  private async stillWanted(backendId: string, uris: readonly string[]): Promise<string[]> {
    const counts = await Promise.all(uris.map((uri) => this.deps.registry.count(backendId, uri)));
    return uris.filter((_, index) => (counts[index] ?? 0) > 0);
  }

  /** Reads the resource; an update is published when its content hash differs from the last one. */
  private async pollOnce(backend: WatchedBackend, uri: string, poll: PollState): Promise<void> {
    if (poll.stopped) return;
    let ttlMs: number | undefined;
    try {
      const result = await backend.request("resources/read", { uri });
      ttlMs = typeof result.ttlMs === "number" && result.ttlMs > 0 ? result.ttlMs : undefined;
      const hash = createHash("sha256").update(JSON.stringify(result.contents ?? null)).digest("base64url");
      if (poll.hash !== undefined && poll.hash !== hash && !poll.stopped) this.resourceUpdated(backend.id, uri);
      poll.hash = hash;
    } catch (error) {
      this.deps.logger.debug({ backend: backend.id, uri, err: (error as Error).message }, "poll failed");
    }
    if (poll.stopped || this.closed) return;
    // A backend's ttlMs is honoured up to the longest delay a Node timer holds (longer ones fire at once).
    const interval = Math.min(MAX_TIMER_MS, Math.max(MIN_POLL_MS, ttlMs ?? backend.config.pollIntervalMs ?? this.deps.pollIntervalMs));
    poll.timer = this.deps.clock.setTimeout(() => void this.pollOnce(backend, uri, poll), interval);
    poll.timer.unref?.();
  }

  private stopPoll(poll: PollState): void {
    poll.stopped = true;
    if (poll.timer !== undefined) this.deps.clock.clearTimeout(poll.timer);
  }
}

/**
 * One backend's slots by URI, counting the URI lengths present: an update's ancestors (a handful
 * of cuts of its URI, one lookup each, for every update) are looked up only at those lengths.
 */
class SlotMap extends Map<string, Slot> {
  private readonly lengths = new Map<number, number>();

  override set(uri: string, slot: Slot): this {
    if (!this.has(uri)) this.lengths.set(uri.length, (this.lengths.get(uri.length) ?? 0) + 1);
    return super.set(uri, slot);
  }

  override delete(uri: string): boolean {
    if (!super.delete(uri)) return false;
    const left = (this.lengths.get(uri.length) ?? 1) - 1;
    if (left === 0) this.lengths.delete(uri.length);
    else this.lengths.set(uri.length, left);
    return true;
  }

  override clear(): void {
    super.clear();
    this.lengths.clear();
  }

  hasLength(length: number): boolean {
    return this.lengths.has(length);
  }
}

function modeOf(backend: WatchedBackend): Mode {
  if (backend.capabilities?.resources?.subscribe !== true) return "poll";
  return backend.era === "modern" ? "listen" : "subscribe";
}

/** Runs tasks at most `limit` at a time; the others wait their turn, in order. */
class Limiter {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running < this.limit) this.running++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      // The turn passes straight to the next task waiting, if any.
      const next = this.waiting.shift();
      if (next === undefined) this.running--;
      else next();
    }
  }
}

/** Runs `fn` over `items`, at most `limit` at a time. */
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(limit, 1), items.length) }, worker));
}

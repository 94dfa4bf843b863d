import { BrokerError, CHANNEL, ERROR_CATALOG, type BrokerErrorCode, watcherLease, type Bus, type BusMessage, type Clock, type Leases, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import type { UpstreamPort, UpstreamSubscriptions } from "./upstream-subscriptions.js";

type WatchMessage = Extract<BusMessage, { kind: `watch.${string}` }>;

/** Lookups of a backend's watcher one ensure makes when the watcher changes under it. */
const WATCHER_ATTEMPTS = 3;

interface PendingEnsure {
  resolve(): void;
  reject(error: BrokerError): void;
  timer: TimerHandle;
  backendId: string;
  /** The watcher asked. */
  holder: string;
}

export interface BackendWatchersDeps {
  /** This instance's watcher role (upstream subscriptions on its own backend connections). */
  local: UpstreamSubscriptions;
  leases: Leases;
  bus: Bus;
  clock: Clock;
  logger: Logger;
  instanceId: string;
  backendIds: readonly string[];
  /** Whether this instance's connection to the backend is up (only then may it watch). */
  connected(backendId: string): boolean;
  leaseTtlMs: number;
  /** How long an ensure waits for the watcher on another instance. */
  watcherTimeoutMs: number;
  /** This member watches before those that are not preferred (see `LeaseOptions.preferred`). */
  preferred?: boolean;
  /**
   * This instance starts watching the backend (it took the lease, or its connection came back while
   * it held it): whatever the backend changed while nobody was watching is caught up on.
   */
  onWatching?: (backendId: string) => void;
  /** This instance still watches the backend (its periodic lease renewal, every third of the lease TTL). */
  onStillWatching?: (backendId: string) => void;
}

/**
 * One watcher per backend for the whole cluster: the instance holding the backend's lease makes
 * every upstream subscription to it, so there is one per (backend, URI) however many instances
 * have subscribers. The other instances send their `ensure`s (and answers come back) and releases
 * over the bus. An instance competes for a lease only while its own connection to that backend is
 * up, and gives it up when the connection drops, so a watcher can always reach its backend. When a
 * holder dies its lease expires and another instance takes over: it watches the registry's wanted
 * set (counting each URI as updated once, since updates may have been missed). The holder also
 * reconciles desired against actual at its renewals, at most every `RECONCILE_INTERVAL_MS`, which
 * repairs messages lost on the bus.
 *
 * With the memory engine there is one instance and it holds every lease of a connected backend.
 */
/** The shortest time between two periodic reconciles of one backend (each reads its whole wanted set). */
export const RECONCILE_INTERVAL_MS = 3_000;

export class BackendWatchers implements UpstreamPort {
  private readonly held = new Set<string>();
  /** Another member that watches each backend, as last looked up, and until when (clock ms) that lookup is trusted. */
  private readonly watchers = new Map<string, { holder: string; until: number }>();
  private readonly pending = new Map<number, PendingEnsure>();
  /** Backends whose lease is being acquired, renewed or given up right now (one at a time each). */
  private readonly busy = new Map<string, Promise<void>>();
  /** Backends whose periodic reconcile is running (one at a time each). */
  private readonly reconciling = new Set<string>();
  /** When each backend's last periodic reconcile started (clock ms). */
  private readonly reconciled = new Map<string, number>();
  private nextId = 0;
  /** Until then (clock ms) this member does not take a vacant lease it did not hold (see `publishGap`). */
  private vacantGraceUntil = 0;
  /**
   * Until then (clock ms: one lease TTL after `start`) this member takes only free leases, not
   * those of a holder that is gone: a restarted member would otherwise win the lease its previous
   * incarnation held (it competes as it starts, the others only every third of a TTL) and take on
   * re-watching every subscribed resource upstream while its own clients come back to it. A member
   * that has been up takes such a lease over instead; if there is none, the lease expires and this
   * one takes it free.
   */
  private takeOverFrom = Number.POSITIVE_INFINITY;
  private timer: TimerHandle | undefined;
  private closed = false;

  constructor(private readonly deps: BackendWatchersDeps) {}

  /** Starts hearing answers and competing for leases (renewed every third of their TTL). */
  async start(): Promise<void> {
    this.takeOverFrom = this.deps.clock.now() + this.deps.leaseTtlMs;
    await this.deps.bus.subscribe(CHANNEL.replies(this.deps.instanceId));
    // Every member hears every backend's requests (few: subscribes and releases), so a new holder
    // misses none while it takes over; an ensure names the holder it is for.
    for (const backendId of this.deps.backendIds) await this.deps.bus.subscribe(CHANNEL.watcher(backendId));
    this.schedule();
  }

  /** Whether this instance watches the backend now. */
  holds(backendId: string): boolean {
    return this.held.has(backendId);
  }

  /** Backends this instance watches (for /readyz and metrics). */
  heldBackends(): string[] {
    return [...this.held];
  }

  /** No lease change is in flight (readiness: a subscribe right after it finds its watcher). */
  settled(): boolean {
    return this.busy.size === 0;
  }

  /**
   * The connection to Redis just dropped; Redis may come back empty, its leases gone: until the
   * connection is back (and one lease TTL after, see `publishGap`) this member takes no vacant lease
   * it did not hold, so that the watchers can take theirs back.
   */
  publishLost(): void {
    this.vacantGraceUntil = Number.POSITIVE_INFINITY;
  }

  /**
   * Publishes from this instance may have failed for a while (the bus lost its connection): the
   * updates of every backend it watches count as missed, so each watched URI is announced once.
   */
  publishGap(): void {
    // Redis may have come back empty (its leases gone with the rest): the holders take their
    // leases back at once, and everyone else leaves a vacant lease alone for one lease TTL, so a
    // watcher that never stopped watching keeps its backend instead of a takeover's unsubscribing,
    // re-subscribing and re-announcing everything.
    this.vacantGraceUntil = this.deps.clock.now() + this.deps.leaseTtlMs;
    for (const backendId of this.held) {
      this.deps.local.updatesMissed(backendId);
      void this.step(backendId);
    }
  }

  /** This instance's connection to the backend came up: compete for its lease now. */
  backendConnected(backendId: string): Promise<void> {
    return this.step(backendId, "connected");
  }

  /** This instance's connection dropped: its subscriptions there are gone; let another instance watch. */
  backendDisconnected(backendId: string): void {
    this.deps.local.backendDisconnected({ id: backendId });
    void this.step(backendId);
  }

  /** Only what this member watches itself is known at once (see `UpstreamPort.watching`). */
  watching(backendId: string, uri: string): boolean {
    return this.held.has(backendId) && this.deps.local.watching(backendId, uri);
  }

  ensure(backendId: string, uri: string): Promise<void> {
    // This member watches the backend: no lookup to refresh, and no async frames on the way (a
    // listen asks this for each of its URIs). It may stop watching while the subscribe is made
    // (another member took the lease over): then the new watcher is asked, as from any member.
    if (this.held.has(backendId)) return this.deps.local.ensure(backendId, uri).catch((error: unknown) => this.afterLocalEnsure(error, backendId, uri));
    return this.ensureVia(backendId, uri);
  }

  private afterLocalEnsure(error: unknown, backendId: string, uri: string): Promise<void> {
    if (error instanceof BrokerError && error.data?.watcherChanged === true) return this.ensureVia(backendId, uri);
    throw error;
  }

  private async ensureVia(backendId: string, uri: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.ensureOnce(backendId, uri, attempt > 1);
      } catch (error) {
        this.watchers.delete(backendId);
        // The holder changed between the lookup and the request: look it up again.
        if (!(error instanceof BrokerError && error.data?.watcherChanged === true) || attempt >= WATCHER_ATTEMPTS) throw error;
      }
    }
  }

  /**
   * The backend's watcher: the one a lookup found less than a third of a lease TTL ago (a burst of
   * subscribes on this member asks Redis once), or a fresh lookup. Asking a watcher that has just
   * stopped costs a `watcherChanged` answer and a fresh lookup; one that died, the wait until the
   * pending ensure is redirected, as with a lookup made just before it died.
   */
  private async holderOf(backendId: string, fresh: boolean): Promise<string | undefined> {
    const known = this.watchers.get(backendId);
    const now = this.deps.clock.now();
    if (!fresh && known !== undefined && known.until > now) return known.holder;
    const holder = await this.deps.leases.holder(watcherLease(backendId));
    if (holder === undefined || holder === this.deps.instanceId) this.watchers.delete(backendId);
    else this.watchers.set(backendId, { holder, until: now + this.deps.leaseTtlMs / 3 });
    return holder;
  }

  private async ensureOnce(backendId: string, uri: string, fresh: boolean): Promise<void> {
    if (this.held.has(backendId)) return this.deps.local.ensure(backendId, uri);
    const name = watcherLease(backendId);
    let holder = await this.holderOf(backendId, fresh);
    // Redis came back empty a moment ago: its watcher is taking its lease back.
    for (let grace = this.vacantGraceUntil - this.deps.clock.now(); holder === undefined && grace > 0; grace = this.vacantGraceUntil - this.deps.clock.now()) {
      await new Promise<void>((resolve) => this.deps.clock.setTimeout(resolve, Math.min(grace, Math.max(50, this.deps.leaseTtlMs / 10))));
      holder = await this.deps.leases.holder(name);
    }
    // Nobody watches it, or this instance is taking over right now: finish that step (it takes a free lease).
    if ((holder === undefined && this.deps.connected(backendId)) || holder === this.deps.instanceId) {
      await this.step(backendId);
      if (this.held.has(backendId)) return this.deps.local.ensure(backendId, uri);
      holder = await this.deps.leases.holder(name);
    }
    if (holder === undefined || holder === this.deps.instanceId) {
      throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backendId}' is not connected to any broker instance; retry later.`, { backend: backendId });
    }
    const id = ++this.nextId;
    const answered = new Promise<void>((resolve, reject) => {
      const timer = this.deps.clock.setTimeout(() => {
        this.pending.delete(id);
        reject(new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backendId}': its watcher (another broker instance) did not answer; retry later.`, { backend: backendId }));
      }, this.deps.watcherTimeoutMs);
      this.pending.set(id, { resolve, reject, timer, backendId, holder });
    });
    // The answer may come before the publish below resolves (it and the reply use different Redis
    // connections): a rejection then would find no handler yet, and take the process down.
    answered.catch(() => undefined);
    try {
      await this.deps.bus.publish(CHANNEL.watcher(backendId), {
        kind: "watch.ensure",
        v: 1,
        origin: this.deps.instanceId,
        to: holder,
        id,
        replyTo: CHANNEL.replies(this.deps.instanceId),
        backendId,
        uri,
      });
    } catch (error) {
      this.settle(id, { code: "CLUSTER_UNAVAILABLE", message: `Backend '${backendId}': cannot reach its watcher through Redis: ${(error as Error).message}` });
    }
    return answered;
  }

  release(backendId: string, uri: string): void {
    if (this.held.has(backendId)) {
      this.deps.local.release(backendId, uri);
      return;
    }
    // Nobody watching: the next watcher starts from the registry, where this is gone already.
    void this.deps.bus
      .publish(CHANNEL.watcher(backendId), { kind: "watch.release", v: 1, origin: this.deps.instanceId, backendId, uri })
      .catch((error: unknown) => this.deps.logger.warn({ backend: backendId, uri, err: (error as Error).message }, "cannot send a release to the watcher; its reconcile will release it"));
  }

  /** A `watch.*` bus message (decoded by the bus). */
  receive(message: WatchMessage): void {
    switch (message.kind) {
      case "watch.result":
        this.settle(message.id, message.error);
        return;
      case "watch.release":
        if (this.held.has(message.backendId)) this.deps.local.release(message.backendId, message.uri);
        return;
      case "watch.ensure":
        if (message.to === this.deps.instanceId) void this.answer(message);
    }
  }

  /** Gives up every lease (graceful shutdown: the others take over at once, not after the TTL). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
    for (const [id] of this.pending) this.settle(id, { code: "BACKEND_UNAVAILABLE", message: "The broker instance is shutting down." });
    await Promise.allSettled([...this.busy.values()]);
    await Promise.allSettled([...this.held].map((backendId) => this.deps.leases.release(watcherLease(backendId), this.deps.instanceId)));
    this.held.clear();
  }

  private async answer(message: Extract<WatchMessage, { kind: "watch.ensure" }>): Promise<void> {
    let error: { code: string; message: string; data?: Record<string, unknown> } | undefined;
    if (!this.held.has(message.backendId)) {
      error = { code: "BACKEND_UNAVAILABLE", message: `Backend '${message.backendId}': its watcher changed; retry.`, data: { backend: message.backendId, watcherChanged: true } };
    } else {
      try {
        await this.deps.local.ensure(message.backendId, message.uri);
      } catch (failure) {
        const known = failure instanceof BrokerError ? failure : new BrokerError("INTERNAL", (failure as Error).message);
        error = { code: known.code, message: known.message, ...(known.data !== undefined && { data: known.data }) };
      }
      // Watched: later subscribes elsewhere need not ask (the first one after a release removed the mark).
      if (error === undefined) this.deps.local.markWatched(message.backendId, message.uri);
    }
    await this.deps.bus
      .publish(message.replyTo, { kind: "watch.result", v: 1, origin: this.deps.instanceId, id: message.id, ...(error !== undefined && { error }) })
      .catch((failure: unknown) => this.deps.logger.warn({ backend: message.backendId, err: (failure as Error).message }, "cannot answer a watch request"));
  }

  /**
   * Ensures waiting on a watcher that no longer holds the lease (it died, and another member took
   * over) are asked again of the new one, instead of waiting out `watcherTimeoutMs`.
   */
  private async redirectPending(): Promise<void> {
    const asked = new Map<string, Set<string>>();
    for (const { backendId, holder } of this.pending.values()) asked.set(backendId, (asked.get(backendId) ?? new Set()).add(holder));
    for (const [backendId, holders] of asked) {
      const now = await this.deps.leases.holder(watcherLease(backendId));
      if (now === undefined) continue;
      for (const [id, pending] of [...this.pending]) {
        if (pending.backendId === backendId && holders.has(pending.holder) && pending.holder !== now) {
          this.settle(id, { code: "BACKEND_UNAVAILABLE", message: `Backend '${backendId}': its watcher changed; retry.`, data: { backend: backendId, watcherChanged: true } });
        }
      }
    }
  }

  private settle(id: number, error: { code: string; message: string; data?: Record<string, unknown> } | undefined): void {
    const pending = this.pending.get(id);
    if (pending === undefined) return;
    this.pending.delete(id);
    this.deps.clock.clearTimeout(pending.timer);
    if (error === undefined) pending.resolve();
    else pending.reject(new BrokerError(isBrokerCode(error.code) ? error.code : "INTERNAL", error.message, error.data));
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = this.deps.clock.setTimeout(() => {
      this.timer = undefined;
      void Promise.allSettled([...this.deps.backendIds.map((backendId) => this.step(backendId, "periodic")), this.redirectPending()]).then(() => this.schedule());
    }, Math.max(100, Math.floor(this.deps.leaseTtlMs / 3)));
    this.timer.unref?.();
  }

  /**
   * One lease step for a backend, never two at once: acquire, renew or give up. What follows from it
   * (re-subscribing after a takeover or a reconnect, the periodic reconcile) runs detached, so a
   * slow backend never holds up a renewal.
   */
  private step(backendId: string, reason: "periodic" | "connected" | "other" = "other"): Promise<void> {
    const previous = this.busy.get(backendId) ?? Promise.resolve();
    const next = previous.then(() => this.leaseStep(backendId, reason));
    const tracked = next.catch((error: unknown) => this.deps.logger.warn({ backend: backendId, err: (error as Error).message }, "watcher lease step failed"));
    this.busy.set(backendId, tracked);
    void tracked.then(() => {
      if (this.busy.get(backendId) === tracked) this.busy.delete(backendId);
    });
    return tracked;
  }

  private async leaseStep(backendId: string, reason: "periodic" | "connected" | "other"): Promise<void> {
    if (this.closed) return;
    const name = watcherLease(backendId);
    const { instanceId, leaseTtlMs } = this.deps;
    if (!this.deps.connected(backendId)) {
      if (this.held.delete(backendId)) {
        await this.deps.leases.release(name, instanceId);
        this.deps.logger.info({ backend: backendId }, "gave up watching the backend (connection down)");
      } else if (this.deps.preferred === true && reason === "other") {
        // Out of the running: no other member waits for a preferred one that cannot watch.
        await this.deps.leases.release(name, instanceId);
      }
      return;
    }
    if (this.held.has(backendId)) {
      let renewed: boolean;
      try {
        renewed = await this.deps.leases.renew(name, instanceId, leaseTtlMs, { preferred: this.deps.preferred === true });
      } catch (error) {
        // Cannot tell: keep watching (a second watcher for a moment beats none).
        this.deps.logger.warn({ backend: backendId, err: (error as Error).message }, "cannot renew the watcher lease");
        return;
      }
      // The lease is gone but nobody else took it (this member stalled past the TTL, and kept its
      // claim as the last holder; or Redis lost its data): take it back and keep watching. The
      // upstream subscriptions never lapsed; what could not be published meanwhile is re-announced
      // by the publish gap, so a takeover's re-subscribing and re-announcing everything would only
      // add churn and a second spurious update per subscriber.
      if (!renewed && (await this.deps.leases.acquire(name, instanceId, leaseTtlMs, { preferred: this.deps.preferred === true }))) {
        this.deps.logger.warn({ backend: backendId }, "the watcher lease had lapsed (this member stalled past the lease TTL, or Redis lost its data); took it back");
        renewed = true;
      }
      if (!renewed) {
        this.held.delete(backendId);
        this.deps.local.relinquish(backendId);
        this.deps.logger.warn({ backend: backendId }, "lost the watcher lease; another instance watches the backend");
        return;
      }
      // Reconnected while holding the lease: the connection's subscriptions are gone, watch again.
      if (reason === "connected") this.watchingNow(backendId);
      else if (reason === "periodic") this.deps.onStillWatching?.(backendId);
      const now = this.deps.clock.now();
      if (reason === "periodic" && !this.reconciling.has(backendId) && now - (this.reconciled.get(backendId) ?? -Infinity) >= RECONCILE_INTERVAL_MS) {
        this.reconciling.add(backendId);
        this.reconciled.set(backendId, now);
        void this.deps.local.reconcile(backendId).finally(() => this.reconciling.delete(backendId));
      }
      return;
    }
    const now = this.deps.clock.now();
    if (now < this.vacantGraceUntil) return;
    if (!(await this.deps.leases.acquire(name, instanceId, leaseTtlMs, { takeOver: now >= this.takeOverFrom, preferred: this.deps.preferred === true }))) return;
    this.held.add(backendId);
    this.deps.logger.info({ backend: backendId, preferred: this.deps.preferred === true }, "watching the backend for the cluster");
    this.watchingNow(backendId);
  }

  private watchingNow(backendId: string): void {
    // This re-subscribe reads the whole wanted set: the next periodic reconcile is not due before the interval.
    this.reconciled.set(backendId, this.deps.clock.now());
    void this.deps.local.backendConnected({ id: backendId });
    this.deps.onWatching?.(backendId);
  }
}

function isBrokerCode(code: string): code is BrokerErrorCode {
  return Object.hasOwn(ERROR_CATALOG, code);
}

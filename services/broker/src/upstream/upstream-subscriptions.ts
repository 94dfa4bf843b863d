import { createHash } from "node:crypto";
import { BrokerError, CHANNEL, type Bus, type Clock, type SubscriptionRegistry, type TimerHandle } from "@mcp-broker/shared";
import { ancestorsOf } from "../catalog/catalog.js";
import type { Logger } from "../logger.js";
import type { BackendConnection } from "./backend-connection.js";
import type { BackendPool } from "./backend-pool.js";

/** How one (backend, URI) is watched upstream. */
type Mode = "subscribe" | "listen" | "poll";

interface Watch {
  mode: Mode;
  poll?: { timer: TimerHandle | undefined; hash: string | undefined; stopped: boolean };
}

/** What the subscribe orchestration needs from the upstream side. */
export interface UpstreamPort {
  /** Resolves once (backend, uri) is watched upstream; idempotent; concurrent calls share one attempt. */
  ensure(backendId: string, uri: string): Promise<void>;
  /** The cluster-wide count for (backend, uri) reached zero: unwatch after the grace period. */
  release(backendId: string, uri: string): void;
}

const MIN_POLL_MS = 1_000;

/**
 * The watcher role: one upstream subscription per (backend, URI) while anyone wants it.
 * Legacy backends get `resources/subscribe`; modern backends one `subscriptions/listen` stream whose
 * filter is the wanted set; backends that cannot push are polled and an update is emitted when the
 * content hash changes. After a reconnect every wanted URI is watched again. Updates are published
 * on the bus, once per matching subscription key (the URI itself or an ancestor of it).
 */
export class UpstreamSubscriptions implements UpstreamPort {
  private readonly watches = new Map<string, Map<string, Watch>>();
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly graceTimers = new Map<string, TimerHandle>();
  private pool: BackendPool | undefined;

  constructor(
    private readonly deps: {
      registry: SubscriptionRegistry;
      bus: Bus;
      clock: Clock;
      logger: Logger;
      instanceId: string;
      releaseGraceMs: number;
      pollIntervalMs: number;
    },
  ) {}

  attach(pool: BackendPool): void {
    this.pool = pool;
  }

  async ensure(backendId: string, uri: string): Promise<void> {
    const key = `${backendId}\u0000${uri}`;
    const grace = this.graceTimers.get(key);
    if (grace !== undefined) {
      this.deps.clock.clearTimeout(grace);
      this.graceTimers.delete(key);
    }
    if (this.watchesOf(backendId).has(uri)) return;
    const running = this.inflight.get(key);
    if (running !== undefined) return running;
    const attempt = this.watch(backendId, uri).finally(() => this.inflight.delete(key));
    this.inflight.set(key, attempt);
    return attempt;
  }

  release(backendId: string, uri: string): void {
    const key = `${backendId}\u0000${uri}`;
    if (this.graceTimers.has(key)) return;
    const timer = this.deps.clock.setTimeout(() => {
      this.graceTimers.delete(key);
      void this.unwatchIfUnwanted(backendId, uri);
    }, this.deps.releaseGraceMs);
    timer.unref?.();
    this.graceTimers.set(key, timer);
  }

  /** URIs of a backend currently watched upstream (for tests and the operator view). */
  watched(backendId: string): string[] {
    return [...this.watchesOf(backendId).keys()];
  }

  /** A backend (re)connected: everything wanted is watched again, without any client action. */
  async backendConnected(backend: BackendConnection): Promise<void> {
    this.clearBackend(backend.id);
    for (const uri of await this.deps.registry.wanted(backend.id)) {
      try {
        await this.ensure(backend.id, uri);
      } catch (error) {
        this.deps.logger.warn({ backend: backend.id, uri, err: (error as Error).message }, "re-subscribe after reconnect failed");
      }
    }
  }

  /** The upstream session is gone and so are its subscriptions. */
  backendDisconnected(backend: BackendConnection): void {
    this.clearBackend(backend.id);
  }

  /** An update from a backend: published once per watched key it falls under (itself and its ancestors). */
  resourceUpdated(backendId: string, uri: string): void {
    const at = this.deps.clock.now();
    const watches = this.watchesOf(backendId);
    for (const key of [uri, ...ancestorsOf(uri)]) {
      if (!watches.has(key)) continue;
      void this.deps.bus
        .publish(CHANNEL.resource(backendId, key), { kind: "resource.updated", v: 1, origin: this.deps.instanceId, backendId, key, uri, at })
        .catch((error: unknown) => this.deps.logger.warn({ backendId, uri, err: (error as Error).message }, "publish failed"));
    }
  }

  close(): void {
    for (const timer of this.graceTimers.values()) this.deps.clock.clearTimeout(timer);
    this.graceTimers.clear();
    for (const backendId of this.watches.keys()) this.clearBackend(backendId);
  }

  private watchesOf(backendId: string): Map<string, Watch> {
    let map = this.watches.get(backendId);
    if (map === undefined) {
      map = new Map();
      this.watches.set(backendId, map);
    }
    return map;
  }

  private backend(backendId: string): BackendConnection {
    const backend = this.pool?.get(backendId);
    if (backend?.state !== "connected") {
      throw new BrokerError("BACKEND_UNAVAILABLE", `Backend '${backendId}' is not connected; retry later.`, { backend: backendId });
    }
    return backend;
  }

  private async watch(backendId: string, uri: string): Promise<void> {
    const backend = this.backend(backendId);
    const caps = backend.capabilities?.resources;
    const mode: Mode = caps?.subscribe === true ? (backend.era === "modern" ? "listen" : "subscribe") : "poll";
    const watches = this.watchesOf(backendId);
    if (mode === "subscribe") {
      await backend.request("resources/subscribe", { uri });
      watches.set(uri, { mode });
    } else if (mode === "listen") {
      watches.set(uri, { mode });
      this.syncListenFilter(backend);
    } else {
      const poll = { timer: undefined, hash: undefined, stopped: false };
      watches.set(uri, { mode, poll });
      await this.pollOnce(backend, uri, poll);
    }
    this.deps.logger.debug({ backend: backendId, uri, mode }, "upstream subscription established");
  }

  private async unwatchIfUnwanted(backendId: string, uri: string): Promise<void> {
    if ((await this.deps.registry.count(backendId, uri)) > 0) return;
    const watches = this.watchesOf(backendId);
    const watch = watches.get(uri);
    if (watch === undefined) return;
    watches.delete(uri);
    this.deps.logger.debug({ backend: backendId, uri, mode: watch.mode }, "upstream subscription released");
    const backend = this.pool?.get(backendId);
    if (watch.poll !== undefined) this.stopPoll(watch.poll);
    if (backend?.state !== "connected") return;
    if (watch.mode === "subscribe") {
      await backend.request("resources/unsubscribe", { uri }).catch((error: unknown) => {
        this.deps.logger.warn({ backend: backendId, uri, err: (error as Error).message }, "upstream unsubscribe failed");
      });
    } else if (watch.mode === "listen") {
      this.syncListenFilter(backend);
    }
  }

  private syncListenFilter(backend: BackendConnection): void {
    const uris = [...this.watchesOf(backend.id).entries()].filter(([, w]) => w.mode === "listen").map(([u]) => u);
    backend.setListenFilter({ resourceSubscriptions: uris });
  }

  /** Reads the resource; an update is published when its content hash differs from the last one. */
  private async pollOnce(backend: BackendConnection, uri: string, poll: NonNullable<Watch["poll"]>): Promise<void> {
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
    if (poll.stopped) return;
    const interval = Math.max(MIN_POLL_MS, ttlMs ?? backend.config.pollIntervalMs ?? this.deps.pollIntervalMs);
    poll.timer = this.deps.clock.setTimeout(() => void this.pollOnce(backend, uri, poll), interval);
    poll.timer.unref?.();
  }

  private stopPoll(poll: NonNullable<Watch["poll"]>): void {
    poll.stopped = true;
    if (poll.timer !== undefined) this.deps.clock.clearTimeout(poll.timer);
  }

  private clearBackend(backendId: string): void {
    for (const watch of this.watchesOf(backendId).values()) if (watch.poll !== undefined) this.stopPoll(watch.poll);
    this.watches.delete(backendId);
  }
}

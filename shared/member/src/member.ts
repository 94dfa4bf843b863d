import { randomBytes, randomUUID } from "node:crypto";
import {
  CHANNEL,
  MemoryBus,
  MemoryCatalogStore,
  MemoryJobQueue,
  MemoryLeases,
  MemoryPositions,
  MemoryRegistry,
  MemorySessionStore,
  MemoryUpdateLog,
  systemClock,
  UnrecoverableJobError,
  watcherLease,
  type BrokerConfig,
  type Bus,
  type BusMessage,
  type CatalogStore,
  type Clock,
  type JobObserver,
  type JobQueue,
  type SessionStore,
  type SubscriptionRegistry,
  type UpdateLog,
} from "@mcp-broker/shared";
import { createRedisEngine, RECONNECT_MAX_MS } from "@mcp-broker/shared/node";
import { ListChanges } from "./catalog/list-changes.js";
import { ListReloader } from "./catalog/list-reloader.js";
import { ConsoleFeedTap } from "./cluster/console-feed-tap.js";
import { heartbeatIntervalMs, InstancePresence } from "./cluster/instance-presence.js";
import { clusterJobSchema, jobKey, type ClusterJob } from "./jobs/cluster-jobs.js";
import { SubscriptionJobs } from "./jobs/subscription-jobs.js";
import { createLogger, type Logger } from "./logger.js";
import { createMemberMetrics, type MemberMetrics } from "./metrics.js";
import type { BackendConnection } from "./upstream/backend-connection.js";
import { BackendPool } from "./upstream/backend-pool.js";
import { BackendWatchers } from "./upstream/backend-watchers.js";
import { UpstreamSubscriptions } from "./upstream/upstream-subscriptions.js";
import { BROKER_VERSION } from "./version.js";

export interface MemberDeps {
  logger?: Logger;
  clock?: Clock;
  instanceId?: string;
  /**
   * This member watches backends before any other that is not (see `LeaseOptions.preferred`): the
   * worker, which serves no clients and is restarted less often than brokers, so that a broker's
   * death or redeploy does not also cost every subscribed resource a re-subscribe upstream.
   */
  preferredWatcher?: boolean;
}

/**
 * What a member tells whoever serves clients on top of it (the broker); a member alone (the worker)
 * has none. Set once, before `start`.
 */
export interface MemberHooks {
  /** This member's connection to the backend came up; the watcher competes for it once this resolves. */
  backendConnected?(backend: BackendConnection): Promise<void>;
  backendDisconnected?(backend: BackendConnection): void;
  /** A backend's `notifications/message`. */
  log?(backend: BackendConnection, params: Record<string, unknown>): void;
  /** A bus message for the serving side: a resource update (this member's own too), a catalog change, a revocation. */
  busMessage?(channel: string, message: Exclude<BusMessage, { kind: `watch.${string}` | "console.listen" }>): void;
  /** Bus messages to this member may have been lost (the bus reconnected). */
  receiveGap?(): void;
  /** An update this member could not publish (Redis away), for its own sessions (see `UpstreamSubscriptions`). */
  unpublished?(backendId: string, keys: readonly string[], uri: string, params: Record<string, unknown> | undefined): void;
  /** The cluster presumed this member dead: what its sessions held may be gone. */
  presumedDead?(): void;
  /** The newest cluster position this member passed on to clients (the floor after Redis lost the counter). */
  newestPosition?(): number;
  /**
   * Redis lost the cluster's state (restarted without persistence): write back what this member
   * holds (session records, subscriptions), and take what comes next as new (catalog versions restart).
   */
  recover?(): Promise<void>;
  /** A heartbeat went through: releases that failed while Redis was away are tried again. */
  retryReleases?(): void;
  /**
   * A heartbeat found this member's writes kept by Redis, and no write-back is under way: a record
   * this member wrote and no longer finds was removed by another member (not lost by Redis).
   */
  steady?(): void;
}

/** A backend as `/readyz` shows it. */
export interface BackendStatus {
  id: string;
  state: string;
  era?: string;
  lastFailure?: string;
  /** Times this member's connection to it came back after a drop. */
  reconnects: number;
  watching: boolean;
}

export interface Member {
  readonly config: BrokerConfig;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly instanceId: string;
  /** "memory" or "redis". */
  readonly engine: string;
  readonly bus: Bus;
  readonly registry: SubscriptionRegistry;
  readonly store: CatalogStore;
  /** Resource updates with their cluster positions and stamps. */
  readonly updates: UpdateLog;
  /** Legacy sessions' records, for adoption by any member. */
  readonly sessions: SessionStore;
  /** The cluster's job queue (this member runs its jobs when `jobs.process` is set). */
  readonly jobs: JobQueue<ClusterJob>;
  readonly pool: BackendPool;
  readonly upstream: UpstreamSubscriptions;
  readonly watchers: BackendWatchers;
  readonly metrics: MemberMetrics;
  /** The version reported to backends and clients. */
  readonly version: string;
  /** This cluster's id (known once started): resume cursors carry it. */
  clusterId(): string;
  /**
   * A secret every member of the cluster shares (known once started; kept in Redis, drawn by the
   * first member, written back by the members when Redis lost its data): what one member seals, any
   * member opens. The memory engine: this process's own.
   */
  sharedSecret(): string;
  attach(hooks: MemberHooks): void;
  /** Connects the engine (rejects when Redis cannot be reached), joins the cluster and starts the backends. */
  start(): Promise<void>;
  /** Every backend connected and answering, and no watcher lease step in flight. */
  ready(): boolean;
  backends(): BackendStatus[];
  /** The instance that watches the backend for the cluster now (holds its lease); undefined: none. */
  watcherOf(backendId: string): Promise<string | undefined>;
  /** Redis answers as far as this member knows (its command connection is up); always true on the memory engine. */
  redisReachable(): boolean;
  /**
   * For a stop while Redis does not answer: drops this member's Redis connections, so that nothing
   * more of the stop waits for it (each step that needs Redis fails at once instead of waiting out
   * its timeout). What this member held stays in Redis, for the cluster's reap once Redis answers
   * again, as after a crash.
   */
  abandonRedis(): void;
  close(): Promise<void>;
}

/**
 * Builds one cluster member from its config: the engine (memory, or Redis when `redisUrl` or `redis.cluster` is set),
 * the backend connections, the watcher role (one lease per backend decides which member makes its
 * upstream subscriptions), the intake of backend list changes, the cluster's jobs (processed here
 * when `jobs.process`) and this member's heartbeat. The broker serves clients on top of one; the
 * worker is one alone.
 */
export function createMember(config: BrokerConfig, deps: MemberDeps = {}): Member {
  const logger = deps.logger ?? createLogger(config.logging.level);
  const clock = deps.clock ?? systemClock;
  const instanceId = deps.instanceId ?? randomUUID();
  let hooks: MemberHooks = {};
  const redis =
    config.redisUrl !== undefined || config.redis.cluster !== undefined
      ? createRedisEngine({
          ...(config.redis.cluster !== undefined ? { cluster: config.redis.cluster } : { url: config.redisUrl }),
          keyPrefix: config.redis.keyPrefix,
          instanceId,
          onInvalidMessage: (channel, reason) => logger.warn({ channel, reason }, "undecodable bus message dropped"),
          onConnectionError: (role, error) => logger.warn({ role, err: error.message }, "Redis connection error"),
        })
      : undefined;
  const { bus, registry, leases } = redis ?? { bus: new MemoryBus(), registry: new MemoryRegistry(), leases: new MemoryLeases(clock) };
  const positions = new MemoryPositions();
  const store = redis?.catalog ?? new MemoryCatalogStore(positions, bus);
  const updates: UpdateLog = redis?.updates ?? new MemoryUpdateLog(bus, positions);
  const sessions: SessionStore = redis?.sessions ?? new MemorySessionStore(clock);
  const counts = { reloads: 0 };
  const jobOptions = {
    attempts: config.jobs.attempts,
    backoffMs: config.jobs.backoffMs,
    onError: (key: string, error: unknown, final: boolean) =>
      logger.warn({ job: key, err: (error as Error).message, final }, final ? "job failed for good" : "job failed; it is retried"),
    onFetchError: (error: Error, pauseMs: number) => logger.warn({ err: error.message, pauseMs }, "taking jobs failed; this member takes none for a while"),
    onRun: ((run) => {
      if (run.key.startsWith("reload:") && run.outcome === "completed") counts.reloads++;
      metrics.observeJob(run);
    }) satisfies JobObserver,
  };
  const jobs: JobQueue<ClusterJob> =
    redis?.jobQueue("jobs", { ...jobOptions, decode: (data) => clusterJobSchema.parse(data), concurrency: config.jobs.concurrency, lockMs: config.jobs.lockMs }) ??
    new MemoryJobQueue<ClusterJob>({ ...jobOptions, clock });

  const feedTap = new ConsoleFeedTap({ bus, clock, instanceId });
  const upstream = new UpstreamSubscriptions({
    registry,
    updates,
    clock,
    logger,
    instanceId,
    releaseGraceMs: config.subscriptions.releaseGraceMs,
    pollIntervalMs: config.subscriptions.pollIntervalMs,
    unpublished: (backendId, keys, uri, params) => hooks.unpublished?.(backendId, keys, uri, params),
    published: (backendId, uri, at) => feedTap.updated(backendId, uri, at),
  });
  const watchers = new BackendWatchers({
    local: upstream,
    leases,
    bus,
    clock,
    logger,
    instanceId,
    backendIds: config.backends.map((backend) => backend.id),
    connected: (backendId) => pool.get(backendId).state === "connected",
    leaseTtlMs: config.redis.leaseTtlMs,
    watcherTimeoutMs: config.redis.watcherTimeoutMs,
    preferred: deps.preferredWatcher === true,
    onWatching: (backendId) => listChanges.watching(pool.get(backendId)),
    onStillWatching: (backendId) => listChanges.stillWatching(pool.get(backendId)),
  });
  const listChanges = new ListChanges({
    jobs,
    backends: config.backends,
    debounceMs: config.lists.debounceMs,
    relistIntervalMs: config.lists.relistIntervalMs,
    watching: (backendId) => watchers.holds(backendId),
    logger,
    now: () => clock.now(),
  });
  const pool = new BackendPool(config.backends, {
    logger,
    clock,
    clientInfo: { name: "mcp-broker", version: BROKER_VERSION },
    listener: {
      connected: (backend) => {
        void (hooks.backendConnected?.(backend) ?? Promise.resolve()).then(() => watchers.backendConnected(backend.id));
      },
      disconnected: (backend) => {
        watchers.backendDisconnected(backend.id);
        hooks.backendDisconnected?.(backend);
      },
      resourceUpdated: (backend, uri, params) => upstream.resourceUpdated(backend.id, uri, params),
      listChanged: (backend, kind, gap) => listChanges.listChanged(backend.id, kind, gap === true ? "gap" : backend.capabilities?.[kind]?.listChanged === true ? "announced" : "undeclared"),
      updatesMissed: (backend, uris) => upstream.updatesMissed(backend.id, uris),
      log: (backend, params) => hooks.log?.(backend, params),
      backlog: () => upstream.backlog(),
    },
  });
  upstream.attach(pool);
  const reloader = new ListReloader({ backends: config.backends, store, logger, instanceId, backend: (id) => pool.get(id) });
  const limits = { perSession: config.subscriptions.maxPerSession, perPrincipal: config.subscriptions.maxPerPrincipal, total: config.subscriptions.maxTotal };
  /**
   * A member is reaped once its heartbeat has been missing for two of its heartbeat periods beyond
   * the TTL: a member that only needs its next heartbeat (Redis restarted from a snapshot in which
   * every heartbeat had expired, or was away longer than the TTL) sends it meanwhile and is spared.
   */
  const deadGraceMs = 2 * heartbeatIntervalMs(config.redis.instanceTtlMs);
  /**
   * After this member's Redis connections had trouble (Redis restarted, or went away), nobody is
   * reaped until every member had time to reconnect (its delay grows to `RECONNECT_MAX_MS`) and
   * heartbeat: a member that came back a little later than the others is not dead.
   */
  const settling = (): boolean => redis !== undefined && Date.now() - redis.lastTrouble() < RECONNECT_MAX_MS + deadGraceMs;
  const subscriptionJobs = new SubscriptionJobs({
    registry,
    sessions,
    bus,
    logger,
    clock,
    sessionIdleMs: config.server.sessionIdleMs,
    deadGraceMs,
    settling,
    instanceId,
    release: (backendId, uri) => watchers.release(backendId, uri),
    reclaimJobs: (dead) => reclaimJobsOf(dead),
    enforceLater: (lowered) => jobs.schedule("limits", { type: "limits", limits: lowered }, 0),
  });
  const presence = new InstancePresence({
    registry,
    clock,
    logger,
    ttlMs: config.redis.instanceTtlMs,
    presumedDead: () => {
      logger.error({ ttlMs: config.redis.instanceTtlMs }, "this instance was presumed dead by the cluster (no heartbeat within the TTL, and another member reaped it): its sessions leave it");
      hooks.presumedDead?.();
    },
    writesLost: () => recoverIfLost(true),
    retryReleases: () => hooks.retryReleases?.(),
    steady: () => {
      if (recovering === undefined && !writeBackOwed) hooks.steady?.();
    },
    beforeHeartbeat: async () => {
      // Beside the heartbeats, not before them: a write-back of many sessions takes seconds.
      void recoverIfLost().catch((error: unknown) => logger.warn({ err: (error as Error).message }, "checking the cluster's state failed"));
      await reclaimJobs();
    },
  });
  const metrics = createMemberMetrics({
    backends: () => pool.all(),
    upstreamSubscriptions: (backendId) => upstream.watched(backendId).length,
    watching: (backendId) => watchers.holds(backendId),
    counts: () => ({ updatesIn: upstream.updatesReceived(), reloads: counts.reloads, countRepairs: subscriptionJobs.repairs() }),
    jobs: () => jobs.stats(),
  });

  bus.onMessage((channel, message) => {
    switch (message.kind) {
      case "watch.ensure":
      case "watch.release":
      case "watch.result":
        watchers.receive(message);
        return;
      case "console.listen":
        feedTap.listen(message);
        return;
      default:
        hooks.busMessage?.(channel, message);
    }
  });
  bus.onGap((side) => {
    if (side === "publish-lost") {
      watchers.publishLost();
      return;
    }
    if (side === "publish") watchers.publishGap();
    else hooks.receiveGap?.();
    void recoverIfLost().catch((error: unknown) => logger.warn({ err: (error as Error).message }, "checking the cluster's state failed"));
  });
  if (config.jobs.process) {
    jobs.process(async (key, job) => {
      switch (job.type) {
        case "reload":
          if (!config.backends.some((backend) => backend.id === job.backendId)) {
            // A backend this member's config does not have (removed from the fleet, or this member
            // runs an older config): its periodic reload would fail here every interval for good. It
            // is stopped; a watcher of the backend (a member that has it) sets it again within a minute.
            await jobs.stopRepeat(key);
            throw new UnrecoverableJobError(`backend '${job.backendId}' is not in this member's config; its periodic reload is stopped`);
          }
          return reloader.reload(job.backendId, job.list);
        case "reap":
          return subscriptionJobs.reap();
        case "audit":
          return subscriptionJobs.audit(job.limits);
        case "limits":
          return subscriptionJobs.enforce(job.limits);
      }
    });
  }

  /** The cluster's periodic jobs, one repetition each however many members ask (the newest member's settings win). */
  const scheduleHousekeeping = async (): Promise<void> => {
    const reap: ClusterJob = { type: "reap" };
    const audit: ClusterJob = { type: "audit", limits };
    await jobs.repeat(jobKey(reap), reap, heartbeatIntervalMs(config.redis.instanceTtlMs));
    await jobs.repeat(jobKey(audit), audit, config.jobs.auditIntervalMs);
    // A member that starts with lower limits than the cluster ran with finds the holdings beyond them now.
    await jobs.schedule(jobKey(audit), audit, 0);
  };

  /**
   * The jobs members presumed dead were running go to the others now, not once their locks lapse
   * (up to twice `jobs.lockMs`, their keys' later runs held up meanwhile: a reap, for one).
   */
  const reclaimJobs = async (): Promise<void> => {
    if (redis === undefined || !started || settling()) return;
    for (const dead of await registry.deadInstances(deadGraceMs)) await reclaimJobsOf(dead);
  };
  /** The reap job does it too, before the member leaves the list the heartbeats read. */
  const reclaimJobsOf = async (dead: string): Promise<void> => {
    const moved = await jobs.reclaim(dead);
    if (moved > 0) logger.warn({ instance: dead, jobs: moved }, "a member died running jobs: they go to another member now");
  };

  let started = false;
  /** Redis did not answer when this member stopped (see `abandonRedis`). */
  let abandoned = false;
  let clusterId: string = randomUUID();
  let sharedSecret = randomBytes(32).toString("base64url");
  let recovering: Promise<void> | undefined;
  /** A write-back started and not finished (it failed): Redis may lack what this member holds until one is done. */
  let writeBackOwed = false;
  /** When the last recovery finished (`Date.now()` ms). */
  let recoveredAt = Number.NEGATIVE_INFINITY;
  /** The incarnation of the cluster's state this member knows (see `RedisKeys.generation`). */
  let generation: string | undefined;
  /**
   * Redis keeps the cluster's state; one restarted without persistence has none. Each member notices
   * (the generation it knew is gone: the first to notice writes a new one, the others find it
   * changed) on its next heartbeat or bus reconnect, and writes back what it holds: the cluster's name (the same: cursors stay valid), a position floor (what clients saw
   * still comes first), its heartbeat, its sessions and their subscriptions (the broker's part), the
   * repeated jobs, and each backend's reloads (the catalog's lists, and the periodic relists) where it
   * watches the backend. Watcher leases are taken again as usual, and the watchers then watch what
   * is wanted and count it as updated once.
   */
  const recoverIfLost = async (writesLost = false): Promise<void> => {
    if (redis === undefined || !started) return;
    // A recovery for lost writes runs after one under way (which may have found nothing to do),
    // unless one finished since Redis last had trouble.
    if (writesLost) await recovering?.catch(() => undefined);
    if (writesLost && recoveredAt > redis.lastTrouble()) return;
    recovering ??= (async () => {
      const existing = await redis.redis.set(redis.keys.generation(), randomUUID(), "NX", "GET");
      const current = existing ?? (await redis.redis.get(redis.keys.generation()));
      if (current === generation && !writesLost && !writeBackOwed) return;
      if (current !== generation) logger.error("Redis lost the cluster's state (restarted without persistence?): writing back what this member holds");
      else if (writesLost) logger.warn("Redis may have lost this member's writes since an earlier heartbeat (its heartbeat was gone, or the server changed: a restart, or a failover to a replica that may lag): writing back what this member holds");
      else logger.warn("writing back what this member holds again (the last write-back failed)");
      generation = current ?? undefined;
      // Owed until it is done: one that fails (Redis stalled meanwhile) runs again at the next check.
      writeBackOwed = true;
      await redis.redis.set(redis.keys.cluster(), clusterId, "NX");
      const named = await redis.redis.get(redis.keys.cluster());
      if (named !== null && named !== clusterId) logger.warn({ was: clusterId, now: named }, "another member named the cluster first; cursors this member wrote no longer resume");
      // The first member to write its secret back gives it to the others; what another sealed meanwhile is refused (call again).
      sharedSecret = (await redis.redis.set(redis.keys.sharedSecret(), sharedSecret, "NX", "GET")) ?? sharedSecret;
      await updates.raiseTo(hooks.newestPosition?.() ?? 0);
      // Its heartbeat is the presence's (one at a time: each checks the sequence the last one left).
      await hooks.recover?.();
      await scheduleHousekeeping();
      // The catalog and the lists' periodic reloads went with the rest. A member that keeps its
      // watcher lease (taking it back, not taking it over) does not start watching again, so the
      // watch start's reloads would not come: they are scheduled here, for what it watches.
      for (const backend of config.backends) if (watchers.holds(backend.id)) listChanges.watching(pool.get(backend.id));
      writeBackOwed = false;
      recoveredAt = Date.now();
    })().finally(() => (recovering = undefined));
    await recovering;
  };
  return {
    config,
    logger,
    clock,
    instanceId,
    engine: redis !== undefined ? "redis" : "memory",
    bus,
    registry,
    store,
    updates,
    sessions,
    jobs,
    pool,
    upstream,
    watchers,
    metrics,
    version: BROKER_VERSION,
    clusterId: () => clusterId,
    sharedSecret: () => sharedSecret,
    attach(next) {
      hooks = next;
    },
    async start() {
      if (started) return;
      started = true;
      if (redis !== undefined) {
        try {
          await redis.connect();
        } catch (error) {
          const problem = (error as Error).name === "RedisTopologyError" ? "is not usable" : "cannot be reached";
          throw new Error(`${describeRedis(config)} ${problem}: ${(error as Error).message}`, { cause: error });
        }
      }
      if (redis !== undefined) {
        // The first member to start names the cluster; every later one reads the name.
        const named = await redis.redis.set(redis.keys.cluster(), clusterId, "NX", "GET");
        if (named !== null) clusterId = named;
        sharedSecret = (await redis.redis.set(redis.keys.sharedSecret(), sharedSecret, "NX", "GET")) ?? sharedSecret;
        const fresh = randomUUID();
        generation = (await redis.redis.set(redis.keys.generation(), fresh, "NX", "GET")) ?? fresh;
      }
      await bus.subscribe(CHANNEL.catalog);
      await bus.subscribe(CHANNEL.revocations);
      await bus.subscribe(CHANNEL.sessions);
      await bus.subscribe(CHANNEL.console);
      await scheduleHousekeeping();
      await presence.start();
      await watchers.start();
      pool.start();
    },
    ready: () => pool.ready() && watchers.settled(),
    backends: () =>
      pool.all().map((b) => ({
        id: b.id,
        state: b.readiness,
        ...(b.era !== undefined && { era: b.era }),
        ...(b.lastFailure !== undefined && { lastFailure: b.lastFailure }),
        reconnects: b.reconnects,
        watching: watchers.holds(b.id),
      })),
    watcherOf: (backendId) => leases.holder(watcherLease(backendId)),
    redisReachable: () => redis === undefined || redis.reachable(),
    abandonRedis() {
      if (redis === undefined || abandoned) return;
      abandoned = true;
      // Never started (its port was in use, say): it never reached Redis, and holds nothing there.
      if (started) logger.warn("Redis does not answer: this instance stops without handing over what is left (the cluster's reap takes its sessions and watches once Redis answers again, as after a crash)");
      presence.close();
      redis.abandon();
    },
    async close() {
      presence.close();
      feedTap.close();
      await watchers.close();
      upstream.close();
      await jobs.close({ abandon: abandoned });
      await pool.close();
      await bus.close();
      await registry.close();
      await leases.close();
      await redis?.close();
    },
  };
}

/** What the Redis engine is pointed at, for messages and logs (no password); undefined: the memory engine. */
export function describeRedis(config: BrokerConfig): string {
  if (config.redis.cluster !== undefined) return `the Redis Cluster at ${config.redis.cluster.join(", ")} (redis.cluster)`;
  return `Redis at ${redactUrl(config.redisUrl ?? "")}`;
}

/** A Redis URL without its password, for messages and logs. */
export function redactUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, "//***@");
}

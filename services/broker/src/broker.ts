import { randomUUID } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import {
  CHANNEL,
  MemoryBus,
  MemoryCatalogStore,
  MemoryJobQueue,
  MemoryLeases,
  MemoryPositions,
  MemoryRegistry,
  systemClock,
  type BrokerConfig,
  type Clock,
  type JobObserver,
  type JobQueue,
} from "@mcp-broker/shared";
import { createRedisEngine } from "@mcp-broker/shared/node";
import { CATALOG_KINDS } from "./catalog/catalog.js";
import { CatalogService } from "./catalog/catalog-service.js";
import { ListChanges } from "./catalog/list-changes.js";
import { ListReloader } from "./catalog/list-reloader.js";
import { EdgeSecurity } from "./http/edge-security.js";
import { createHttpServer } from "./http/http-server.js";
import { McpEndpoint } from "./http/mcp-endpoint.js";
import { StartupGate } from "./http/startup-gate.js";
import { clusterJobSchema, jobKey, type ClusterJob } from "./jobs/cluster-jobs.js";
import { SubscriptionJobs } from "./jobs/subscription-jobs.js";
import { createLogger, type Logger } from "./logger.js";
import { createMetrics } from "./metrics.js";
import { Dispatcher } from "./routing/dispatcher.js";
import { Router } from "./routing/router.js";
import { InstancePresence } from "./session/instance-presence.js";
import { SessionHost } from "./session/session-host.js";
import { BackendPool } from "./upstream/backend-pool.js";
import { BackendWatchers } from "./upstream/backend-watchers.js";
import { UpstreamSubscriptions } from "./upstream/upstream-subscriptions.js";
import { BROKER_VERSION } from "./version.js";

export interface BrokerDeps {
  logger?: Logger;
  clock?: Clock;
  instanceId?: string;
}

export interface Broker {
  readonly config: BrokerConfig;
  readonly pool: BackendPool;
  readonly catalog: CatalogService;
  readonly sessions: SessionHost;
  readonly upstream: UpstreamSubscriptions;
  readonly watchers: BackendWatchers;
  /** The cluster's job queue (this member runs its jobs when `jobs.process` is set). */
  readonly jobs: JobQueue<ClusterJob>;
  /** "memory" or "redis". */
  readonly engine: string;
  readonly dispatcher: Dispatcher;
  readonly router: Router;
  readonly logger: Logger;
  /** `bind()`, `startBackends()`, then `serve()` at once; resolves with the bound URL of the MCP endpoint. */
  listen(): Promise<string>;
  /**
   * Binds the HTTP port, before anything else starts, so that a port in use fails fast. From here
   * `/healthz`, `/readyz` and `/metrics` answer; `/mcp` requests wait until `serve()`. Resolves
   * with the bound URL of the MCP endpoint.
   */
  bind(): Promise<string>;
  /** `/mcp` answers from now on, the requests held since `bind()` first. */
  serve(): void;
  /** Starts the engine's connections and the backends (alone: stdio mode and the worker). */
  startBackends(): Promise<void>;
  /** Resolves once every backend has connected and loaded its lists (or the timeout passed). */
  whenReady(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

/** Builds one broker process from its config: everything is constructed here and passed down. */
export function createBroker(config: BrokerConfig, deps: BrokerDeps = {}): Broker {
  const logger = deps.logger ?? createLogger(config.logging.level);
  const clock = deps.clock ?? systemClock;
  const instanceId = deps.instanceId ?? randomUUID();
  const redis =
    config.redisUrl !== undefined
      ? createRedisEngine({
          url: config.redisUrl,
          keyPrefix: config.redis.keyPrefix,
          instanceId,
          onInvalidMessage: (channel, reason) => logger.warn({ channel, reason }, "undecodable bus message dropped"),
          onConnectionError: (role, error) => logger.warn({ role, err: error.message }, "Redis connection error"),
        })
      : undefined;
  const positions = new MemoryPositions();
  const { bus, registry, leases } = redis ?? { bus: new MemoryBus(), registry: new MemoryRegistry(), leases: new MemoryLeases(clock) };
  const store = redis?.catalog ?? new MemoryCatalogStore(positions);
  const engineName = redis !== undefined ? "redis" : "memory";
  const serverInfo = { name: "mcp-broker", version: BROKER_VERSION };
  let reloadsRun = 0;
  const jobOptions = {
    attempts: config.jobs.attempts,
    backoffMs: config.jobs.backoffMs,
    onError: (key: string, error: unknown, final: boolean) =>
      logger.warn({ job: key, err: (error as Error).message, final }, final ? "job failed for good" : "job failed; it is retried"),
    onRun: ((run) => {
      if (run.key.startsWith("reload:") && run.outcome === "completed") reloadsRun++;
      metrics.observeJob(run);
    }) satisfies JobObserver,
  };
  const jobs: JobQueue<ClusterJob> =
    redis?.jobQueue("jobs", { ...jobOptions, decode: (data) => clusterJobSchema.parse(data), concurrency: config.jobs.concurrency, lockMs: config.jobs.lockMs }) ??
    new MemoryJobQueue<ClusterJob>({ ...jobOptions, clock });

  const catalog = new CatalogService(config.backends, {
    logger,
    store,
    onListChanged: (list) => sessions.listChanged(list),
  });
  const reloader = new ListReloader({ backends: config.backends, store, bus, logger, instanceId, backend: (id) => pool.get(id) });
  const upstream = new UpstreamSubscriptions({
    registry,
    bus,
    clock,
    logger,
    instanceId,
    releaseGraceMs: config.subscriptions.releaseGraceMs,
    pollIntervalMs: config.subscriptions.pollIntervalMs,
    deliverLocally: (channel, message) => sessions.receive(channel, message),
  });
  let router: Router | undefined = undefined;
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
    onWatching: (backendId) => listChanges.watching(pool.get(backendId)),
  });
  const listChanges = new ListChanges({
    jobs,
    backends: config.backends,
    debounceMs: config.lists.debounceMs,
    relistIntervalMs: config.lists.relistIntervalMs,
    watching: (backendId) => watchers.holds(backendId),
    logger,
  });
  const pool = new BackendPool(config.backends, {
    logger,
    clock,
    clientInfo: serverInfo,
    listener: {
      connected: (backend) => {
        router?.backendConnected(backend);
        void catalog.backendConnected(backend.id).then(() => watchers.backendConnected(backend.id));
      },
      disconnected: (backend) => {
        watchers.backendDisconnected(backend.id);
        catalog.backendDisconnected(backend.id);
      },
      resourceUpdated: (backend, uri) => upstream.resourceUpdated(backend.id, uri),
      listChanged: (backend, kind) => listChanges.listChanged(backend.id, kind),
      updatesMissed: (backend, uris) => upstream.updatesMissed(backend.id, uris),
      log: (backend, params) => router?.relayLog(backend.id, params),
    },
  });
  upstream.attach(pool);
  router = new Router(catalog.catalog, pool, { pageSize: config.lists.pageSize, heldTool: (name) => catalog.heldTool(name) });
  const dispatcher = new Dispatcher(router, logger, { serverInfo, cacheScope: config.auth.apiKeys.length > 0 ? "private" : "public" });
  // Read at scrape time only (the closures run after everything below exists).
  const metrics = createMetrics({
    sessions: () => ({ legacy: sessions.legacySessions().length, listen: sessions.listenCount() }),
    backends: () => pool.all(),
    upstreamSubscriptions: (backendId) => upstream.watched(backendId).length,
    catalogItems: () => Object.fromEntries(CATALOG_KINDS.map((kind) => [kind, catalog.catalog.list(kind).length])),
    heldTools: () => catalog.heldTools().length,
    watching: (backendId) => watchers.holds(backendId),
    jobs: () => jobs.stats(),
    counts: () => {
      const delivered = sessions.deliveries();
      return { updatesIn: upstream.updatesReceived(), resourceDeliveries: delivered.resourceUpdated, listChangedDeliveries: delivered.listChanged, reloads: reloadsRun, countRepairs: subscriptionJobs.repairs() };
    },
  });
  const sessions = new SessionHost({
    catalog: catalog.catalog,
    subscriptionTarget: (uri) => router.subscriptionTarget(uri),
    registry,
    upstream: watchers,
    bus,
    clock,
    logger,
    limits: {
      perSession: config.subscriptions.maxPerSession,
      perPrincipal: config.subscriptions.maxPerPrincipal,
      total: config.subscriptions.maxTotal,
    },
    idleTimeoutMs: config.server.sessionIdleMs,
    maxSessionsPerPrincipal: config.server.maxSessionsPerPrincipal,
    resumeHistory: config.server.resumeHistory,
    onBusLatency: (ms) => metrics.observeBusLatency(ms),
    releaseGraceMs: config.subscriptions.releaseGraceMs,
  });
  const security = new EdgeSecurity({
    allowedHosts: config.server.allowedHosts,
    allowedOrigins: config.server.allowedOrigins,
    corsOrigins: config.server.corsOrigins,
    apiKeys: config.auth.apiKeys,
  });
  const endpoint = new McpEndpoint({
    dispatcher,
    host: sessions,
    security,
    clock,
    logger,
    options: { maxBodyBytes: config.server.maxBodyBytes, keepAliveMs: config.server.keepAliveMs, serverInfo },
  });
  const presence = new InstancePresence({
    registry,
    clock,
    logger,
    ttlMs: config.redis.instanceTtlMs,
    presumedDead: () => sessions.endAll("this broker instance lost contact with the cluster; start a new session"),
    retryReleases: () => sessions.retryReleases(),
  });
  bus.onMessage((channel, message) => {
    switch (message.kind) {
      case "resource.updated":
        // This instance's own updates reached its sessions already (deliverLocally).
        if (message.origin !== instanceId) sessions.receive(channel, message);
        return;
      case "catalog.changed":
        void catalog.changed(message);
        return;
      case "subscriptions.revoked":
        sessions.revoke(message);
        return;
      default:
        watchers.receive(message);
    }
  });
  bus.onGap((side) => {
    if (side === "publish") {
      watchers.publishGap();
      return;
    }
    sessions.busGap();
    void catalog.resync();
  });
  const limits = { perSession: config.subscriptions.maxPerSession, perPrincipal: config.subscriptions.maxPerPrincipal, total: config.subscriptions.maxTotal };
  const subscriptionJobs = new SubscriptionJobs({
    registry,
    bus,
    logger,
    instanceId,
    release: (backendId, uri) => watchers.release(backendId, uri),
    enforceLater: (lowered) => jobs.schedule("limits", { type: "limits", limits: lowered }, 0),
  });
  if (config.jobs.process) {
    jobs.process(async (_key, job) => {
      switch (job.type) {
        case "reload":
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
    await jobs.repeat(jobKey(reap), reap, Math.max(200, Math.floor(config.redis.instanceTtlMs / 5)));
    await jobs.repeat(jobKey(audit), audit, config.jobs.auditIntervalMs);
    // A member that starts with lower limits than the cluster ran with finds the holdings beyond them now.
    await jobs.schedule(jobKey(audit), audit, 0);
  };
  const gate = new StartupGate();
  let http: Server | undefined;
  let backendsStarted = false;

  const startBackends = async (): Promise<void> => {
    if (backendsStarted) return;
    backendsStarted = true;
    if (redis !== undefined) {
      try {
        await redis.connect();
      } catch (error) {
        throw new Error(`Redis at ${redactUrl(config.redisUrl ?? "")} cannot be reached: ${(error as Error).message}`, { cause: error });
      }
    }
    await bus.subscribe(CHANNEL.catalog);
    await bus.subscribe(CHANNEL.revocations);
    await scheduleHousekeeping();
    await presence.start();
    await watchers.start();
    pool.start();
  };

  const bind = async (): Promise<string> => {
    if (http !== undefined) throw new Error("the broker is bound already");
    const server = createHttpServer({ endpoint, gate, security, pool, catalog: catalog.catalog, heldTools: () => catalog.heldTools(),
      cluster: { engine: engineName, instanceId, watching: (backendId) => watchers.holds(backendId) },
      metrics: metrics.registry, logger, requestTimeoutMs: config.server.requestTimeoutMs });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.server.port, config.server.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    http = server;
    const address = server.address() as AddressInfo;
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
    const url = `http://${host}:${address.port}/mcp`;
    logger.info({ url, backends: config.backends.map((b) => b.id) }, "mcp-broker listening");
    return url;
  };
  const serve = (): void => gate.open();

  return {
    config,
    pool,
    catalog,
    sessions,
    upstream,
    watchers,
    jobs,
    engine: engineName,
    dispatcher,
    router,
    logger,
    startBackends,
    bind,
    serve,
    async listen() {
      const url = await bind();
      await startBackends();
      serve();
      return url;
    },
    async whenReady(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        if (pool.ready() && pool.all().every((b) => b.state !== "connected" || catalog.ready(b.id)) && watchers.settled()) return true;
        await new Promise((r) => setTimeout(r, 25));
      }
      return false;
    },
    async close() {
      // No new connections from here on; then every session and stream ends, the connections
      // close (listen streams end with theirs), and what they held is released before Redis goes.
      gate.close();
      const stopped = http === undefined ? Promise.resolve() : new Promise<void>((resolve) => http?.close(() => resolve()));
      endpoint.closeStreams();
      sessions.close();
      http?.closeAllConnections();
      await stopped;
      await sessions.drain(5_000);
      presence.close();
      await watchers.close();
      upstream.close();
      await jobs.close();
      await pool.close();
      await bus.close();
      await registry.close();
      await leases.close();
      await redis?.close();
    },
  };
}

/** A Redis URL without its password, for messages and logs. */
export function redactUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, "//***@");
}

import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import type { BrokerConfig } from "@mcp-broker/shared";
import { createLogger, createMember, type BackendPool, type BackendWatchers, type ClusterJob, type Logger, type MemberDeps, type UpstreamSubscriptions } from "@mcp-broker/member";
import type { JobQueue } from "@mcp-broker/shared";
import { CATALOG_KINDS } from "./catalog/catalog.js";
import { CatalogService } from "./catalog/catalog-service.js";
import { BusBarrier } from "./fanout/bus-barrier.js";
import { busIntake } from "./fanout/bus-intake.js";
import { ConsoleCensus } from "./http/console-census.js";
import { ConsoleFeed } from "./http/console-feed.js";
import { Fanout } from "./fanout/fanout.js";
import { consoleData } from "./http/console-api.js";
import { EdgeSecurity } from "./http/edge-security.js";
import { createHttpServer } from "./http/http-server.js";
import { McpEndpoint } from "./http/mcp-endpoint.js";
import { StartupGate } from "./http/startup-gate.js";
import { addServerMetrics } from "./metrics.js";
import { Dispatcher } from "./routing/dispatcher.js";
import { META_TOOL_DEFINITIONS, MetaTools } from "./routing/meta-tools.js";
import { HeldCalls, RequestStateSeal } from "./routing/held-calls.js";
import { Router } from "./routing/router.js";
import { SessionHost } from "./session/session-host.js";
import { SessionResume } from "./session/session-resume.js";
import { ResumeCursors } from "./session/resume-cursor.js";

/** The accept queue the HTTP server asks for (see `listen`). */
const LISTEN_BACKLOG = 65_535;

export type BrokerDeps = MemberDeps;

export interface Broker {
  readonly config: BrokerConfig;
  readonly pool: BackendPool;
  readonly catalog: CatalogService;
  readonly sessions: SessionHost;
  /** Where updates and list changes go out to this broker's sessions and streams. */
  readonly fanout: Fanout;
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
  /** Starts the engine's connections and the backends (alone: stdio mode). */
  startBackends(): Promise<void>;
  /** Resolves once every backend has connected and this member applied its lists (or the timeout passed). */
  whenReady(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * Builds one broker process from its config: a cluster member (see `createMember`) and, on top of
 * it, what serves clients: the catalog clients see, sessions and listen streams, routing and the
 * HTTP edge. Everything is constructed here and passed down.
 */
export function createBroker(config: BrokerConfig, deps: BrokerDeps = {}): Broker {
  const member = createMember(config, { ...deps, logger: deps.logger ?? createLogger(config.logging.level) });
  const { logger, clock, registry, bus, pool, watchers } = member;
  const serverInfo = { name: "mcp-broker", version: member.version };

  // Before the catalog: a change the catalog makes on its own takes a position the barrier reserves.
  const barrier = new BusBarrier({ updates: member.updates, instanceId: member.instanceId, clock });
  const catalog = new CatalogService(config.backends, { logger, store: member.store, place: (run) => barrier.place(run), ...(config.metaTools && { ownTools: META_TOOL_DEFINITIONS }) });
  const fanout = new Fanout({
    bus,
    clock,
    logger,
    names: catalog.catalog,
    releaseGraceMs: config.subscriptions.releaseGraceMs,
    onBusLatency: (ms) => metrics.observeBusLatency(ms),
  });
  catalog.onListChanged((list, _diffs, position) => fanout.listChanged(list, position));
  /** How a backend's resource updates reach its subscribers: it pushes them, the watcher polls it, or nothing while it is not connected. */
  const delivery = (backendId: string): "push" | "poll" | "none" => {
    const backend = pool.get(backendId);
    return backend.state !== "connected" ? "none" : backend.capabilities?.resources?.subscribe === true ? "push" : "poll";
  };
  const metaTools = new MetaTools({
    catalog: catalog.catalog,
    subscribers: (backendId, uri) => registry.count(backendId, uri),
    updates: delivery,
  });
  const { stateKey } = config.interaction;
  const seal = new RequestStateSeal(stateKey !== undefined ? () => stateKey : () => member.sharedSecret(), clock, config.interaction.heldCallMs);
  const held = new HeldCalls({ clock, seal, bus, instanceId: member.instanceId });
  const router = new Router(catalog.catalog, pool, { pageSize: config.lists.pageSize, heldTool: (name) => catalog.heldTool(name), metaTools, interaction: { held, seal }, listed: (backendId, kind) => catalog.listed(backendId, kind) });
  const dispatcher = new Dispatcher(router, logger, { serverInfo, cacheScope: config.auth.apiKeys.length > 0 ? "private" : "public" });
  const sessions = new SessionHost({
    catalog: catalog.catalog,
    subscriptionTarget: (uri) => router.subscriptionTarget(uri),
    registry,
    upstream: watchers,
    fanout,
    sessions: member.sessions,
    bus,
    instanceId: member.instanceId,
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
    resume: new SessionResume({ updates: member.updates, listPosition: (list) => catalog.changedPosition(list), caughtUp: () => barrier.caughtUp() }),
    cursors: new ResumeCursors(() => member.clusterId()),
  });
  const census = new ConsoleCensus({ bus, instanceId: member.instanceId, local: (limit) => sessions.census(limit) });
  const feed = new ConsoleFeed({ bus, clock, instanceId: member.instanceId, exposeUri: (backendId, uri) => catalog.catalog.exposeUri(backendId, uri) });
  catalog.onListChanged((list, diffs) => feed.listChanged(list, diffs));
  // Read at scrape time only.
  const metrics = addServerMetrics(member.metrics.registry, {
    sessions: () => ({ legacy: sessions.legacySessions().length, listen: sessions.listenCount() }),
    catalogItems: () => Object.fromEntries(CATALOG_KINDS.map((kind) => [kind, catalog.catalog.list(kind).length])),
    heldTools: () => catalog.heldTools().length,
    interaction: () => ({ questions: sessions.questionsPending(), heldCalls: held.size }),
    deliveries: () => fanout.deliveries(),
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
  member.attach({
    backendConnected: async (backend) => {
      router.backendConnected(backend);
      await catalog.backendConnected(backend.id);
    },
    backendDisconnected: (backend) => catalog.backendDisconnected(backend.id),
    log: (backend, params) => router.relayLog(backend.id, params),
    ...busIntake({ fanout, catalog, sessions, held, census, feed, barrier }),
    presumedDead: () => void sessions.endAll("this broker instance lost contact with the cluster; another takes the session over", config.server.sessionIdleMs),
    newestPosition: () => fanout.events.newest(),
    recover: async () => {
      catalog.forgetVersions();
      // A list stored after the loss, and announced before this member noticed it, was taken for an
      // older version than the one applied here and left out: read again, it is applied now.
      await catalog.resync();
      await sessions.reregister();
    },
    retryReleases: () => sessions.retryReleases(),
    steady: () => void sessions.verifyHeld().catch((error: unknown) => logger.warn({ err: (error as Error).message }, "checking the sessions' records failed")),
  });
  const gate = new StartupGate();
  let http: Server | undefined;

  const bind = async (): Promise<string> => {
    if (http !== undefined) throw new Error("the broker is bound already");
    const server = createHttpServer({
      endpoint,
      gate,
      security,
      status: () => {
        // A connected backend whose lists are not loaded yet serves no items: not ready (on a
        // cluster, its reload is a job, which no member may be running: see cli's waitForBackends).
        const backends = member.backends().map((b) => ({ ...b, listed: catalog.ready(b.id) }));
        const ready = member.ready() && backends.every((b) => b.state !== "connected" || b.listed);
        return { engine: member.engine, instance: member.instanceId, backends, ready, collisions: catalog.catalog.collisions(), heldTools: catalog.heldTools() };
      },
      metrics: member.metrics.registry,
      logger,
      requestTimeoutMs: config.server.requestTimeoutMs,
      whileStarting: config.server.whileStarting,
      http2: config.server.http2,
      ...(config.console.enabled && {
        console: {
          access: {
            security: new EdgeSecurity({
              allowedHosts: config.server.allowedHosts,
              allowedOrigins: config.server.allowedOrigins,
              apiKeys: config.console.adminKeys.map((key) => ({ key, principal: "admin" })),
              basicRealm: "mcp-broker console",
            }),
            localOnly: config.console.adminKeys.length === 0,
          },
          data: consoleData({ catalog: catalog.catalog, registry, updates: member.updates, member, delivery, census, feed, heldTools: () => catalog.heldTools() }),
        },
      }),
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      // A crowd reconnecting at once (an instance died, a load balancer restarted) overflowed
      // Node's default accept queue (511): the connects beyond it wait for a SYN retransmit, 1 s
      // and more. The kernel caps this at net.core.somaxconn (4096 on current Linux).
      server.listen({ port: config.server.port, host: config.server.host, backlog: LISTEN_BACKLOG }, () => {
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
  const serve = (): void => {
    // From here on, clients see its lists (see `CatalogService.serving`).
    catalog.serving();
    gate.open();
  };
  const start = async (): Promise<void> => {
    await member.start();
  };

  return {
    config,
    pool,
    catalog,
    sessions,
    fanout,
    upstream: member.upstream,
    watchers,
    jobs: member.jobs,
    engine: member.engine,
    dispatcher,
    router,
    logger,
    startBackends: start,
    bind,
    serve,
    async listen() {
      const url = await bind();
      await start();
      serve();
      return url;
    },
    async whenReady(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        if (member.ready() && pool.all().every((b) => b.state !== "connected" || catalog.ready(b.id))) return true;
        await new Promise((r) => setTimeout(r, 25));
      }
      return false;
    },
    async close() {
      // No new connections from here on; then every session and stream ends, the connections
      // close (listen streams end with theirs), and what they held is released before Redis goes.
      gate.close();
      // Redis away: nothing below can reach it, so nothing waits for it (each step that needs it fails at once).
      if (!member.redisReachable()) member.abandonRedis();
      const stopped = http === undefined ? Promise.resolve() : new Promise<void>((resolve) => http?.close(() => resolve()));
      // A cluster takes the legacy sessions over: their clients reconnect to another member, which
      // adopts them and resumes their streams. Alone (memory engine), they end.
      if (member.engine !== "memory") {
        const stranded = await sessions.handOffAll("this broker instance is stopping; another takes the session over", config.server.sessionIdleMs);
        // Redis did not answer (stalled, or a connection that went silent): the rest does not wait for it either.
        if (stranded > 0) member.abandonRedis();
      }
      endpoint.closeStreams();
      held.close();
      feed.close();
      sessions.close();
      // Requests in flight (a tool call) get their answers first, within server.drainMs; new ones get 503 meanwhile.
      await endpoint.drain(config.server.drainMs);
      http?.closeAllConnections();
      await stopped;
      await sessions.drain(5_000);
      fanout.close();
      await member.close();
    },
  };
}

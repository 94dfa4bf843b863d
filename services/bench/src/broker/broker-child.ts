/**
 * One broker under test, in a process of its own so that its CPU, RSS and heap are its own.
 * Driven over IPC (see BrokerChildApi); run with --expose-gc for memory figures and optionally
 * --cpu-prof. The broker is the real one: `createBroker` from @mcp-broker/broker.
 */
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { writeHeapSnapshot } from "node:v8";
import { createBroker, createLogger, type Broker } from "@mcp-broker/broker";
import { parseConfig } from "@mcp-broker/shared";
import { BACKEND_ID } from "../core/bench-uris.js";
import { parentLink } from "../core/links.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { BrokerChildApi } from "./broker-child-api.js";

let broker: Broker | undefined;
/** The event loop's delay, sampled every 10 ms (what a request or delivery waits before it runs). */
const loop = monitorEventLoopDelay({ resolution: 10 });
loop.enable();
let profiler: Session | undefined;

const shutdown = async (): Promise<void> => {
  const running = broker;
  broker = undefined;
  await running?.close().catch(() => undefined);
};

const api: BrokerChildApi = {
  start: async ({ config }) => {
    if (broker !== undefined) throw new Error("broker already started");
    const parsed = parseConfig(config, "bench config");
    const started = createBroker(parsed, { logger: createLogger(parsed.logging.level) });
    broker = started;
    const url = await started.listen();
    if (!(await started.whenReady(30_000))) {
      const states = started.pool.all().map((b) => `${b.id}: ${b.state} ${b.lastFailure ?? ""}`);
      throw new Error(`broker not ready: ${states.join("; ")}`);
    }
    return { url };
  },
  usage: reportUsage,
  census: () => ({
    legacySessions: broker?.sessions.legacySessions().length ?? 0,
    listens: broker?.sessions.listenCount() ?? 0,
    watched: broker?.upstream.watched(BACKEND_ID).length ?? 0,
    watching: broker?.watchers.holds(BACKEND_ID) ?? false,
  }),
  loopDelay: ({ reset }) => {
    const delay = { maxMs: loop.max / 1e6, p99Ms: loop.percentile(99) / 1e6 };
    if (reset) loop.reset();
    return delay;
  },
  profileStart: async ({ intervalMicros }) => {
    if (profiler !== undefined) throw new Error("a step profile is already running");
    const session = new Session();
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.setSamplingInterval", { interval: intervalMicros });
    await session.post("Profiler.start");
    profiler = session;
  },
  profileStop: async ({ file }) => {
    const session = profiler;
    profiler = undefined;
    if (session === undefined) throw new Error("no step profile running");
    const { profile } = await session.post("Profiler.stop");
    session.disconnect();
    writeFileSync(file, JSON.stringify(profile));
  },
  heapSnapshot: ({ file }) => {
    writeHeapSnapshot(file);
  },
  stop: async () => {
    await shutdown();
    setTimeout(() => process.exit(0), 20);
  },
};

serveRpc(parentLink(), api);
exitWithParent(shutdown);

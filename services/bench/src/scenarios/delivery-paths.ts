import type { BackendCensus } from "../backend/backend-api.js";
import type { RawPublisherApi, RawServerApi } from "../baseline/raw-api.js";
import type { RelayTransport } from "../baseline/raw-relay.js";
import type { ProcessUsage } from "../core/process-usage.js";
import type { BrokerDeployment, BrokerEngine } from "../engines/broker-engine.js";
import type { TargetKind } from "../load/generator-api.js";
import type { BenchContext } from "./bench-context.js";
import { LoadFleet } from "./load-fleet.js";
import type { DeliveryPath } from "./rate-step.js";

export interface RunningPath extends DeliveryPath {
  /** Time to open every session, ms. */
  readonly openMs: number;
  stop(): Promise<void>;
}

export interface BrokerPath extends RunningPath {
  readonly deployment: BrokerDeployment;
  /** What the backend's connections had subscribed once every session was open. */
  readonly upstream: BackendCensus;
}

export interface RawPath extends RunningPath {
  /** Base URL of the baseline server (POST /rpc, GET /sse). */
  readonly rawUrl: string;
  memory(gc: boolean): Promise<ProcessUsage>;
}

/** Brokers of `engine` fed by the bench backend, with one session per URI in `uris`. */
export async function startBrokerPath(ctx: BenchContext, engine: BrokerEngine, label: string, kind: Exclude<TargetKind, "raw" | "raw-listen">, uris: string[], options: { generators?: number } = {}): Promise<BrokerPath> {
  const deployment = await engine.deploy(label);
  const fleet = LoadFleet.start(ctx.group, label, options.generators ?? ctx.plan.generators);
  const stop = async (): Promise<void> => {
    await fleet.stop();
    await deployment.stop();
  };
  try {
    const openMs = await fleet.open(kind, deployment.urls, uris);
    const backend = deployment.backend;
    return {
      label,
      deployment,
      fleet,
      openMs,
      upstream: await backend.call("census", {}),
      source: { emit: (plan) => backend.call("emit", plan), usage: () => backend.call("usage", { gc: false }) },
      serverUsage: () => deployment.usage(false),
      profiled: (name, run) => deployment.profiled(name, run),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * For a deployment of several brokers, which of them subscribed upstream, as the backend counted
 * it: one when they share subscriptions (the lease holder subscribes for the cluster), each of
 * them when they do not. Empty for a single broker.
 */
export function upstreamNote(path: BrokerPath): string {
  const { subscriptions } = path.upstream;
  if (path.deployment.urls.length < 2) return "";
  const subscribing = subscriptions.filter((n) => n > 0).length;
  const who =
    subscribing === 1
      ? "one broker subscribed upstream for the cluster"
      : `${subscribing} brokers subscribed upstream themselves (not shared: a URI both brokers' sessions hold is sent by the backend to each)`;
  return `backend: ${subscriptions.length} MCP sessions holding ${subscriptions.join(" + ")} subscriptions: ${who}`;
}

/**
 * The broker deployments of a scenario that runs on every engine, for its method text, e.g.
 * "Brokers: memory engine: one broker process …; redis engine: 2 broker processes …".
 */
export function describeEngines(ctx: BenchContext): string {
  return `Brokers: ${ctx.engines.map((e) => `${e.name} engine: ${e.description}${e.unavailableReason === undefined ? "" : ` (not run: ${e.unavailableReason})`}`).join("; ")}.`;
}

/** The baseline server, optionally fed from Redis by the raw publisher, with one stream per key. */
export async function startRawPath(
  ctx: BenchContext,
  label: string,
  keys: string[],
  options: { redis: boolean; cluster?: readonly string[]; generators?: number; relays?: readonly RelayTransport[]; store?: boolean; http2?: boolean } = { redis: true },
): Promise<RawPath> {
  const server = ctx.group.fork<RawServerApi>(new URL("../baseline/raw-sse-server.js", import.meta.url), `raw-server-${label}`, { execArgv: ["--expose-gc"] });
  const publisher = options.redis ? ctx.group.fork<RawPublisherApi>(new URL("../baseline/raw-publisher.js", import.meta.url), `raw-publisher-${label}`) : undefined;
  const fleet = LoadFleet.start(ctx.group, label, options.generators ?? ctx.plan.generators);
  const stop = async (): Promise<void> => {
    await fleet.stop();
    await Promise.all([server.stop(() => server.rpc.call("stop", {})), publisher?.stop(() => publisher.rpc.call("stop", {}))]);
  };
  try {
    const cluster = options.redis && options.cluster !== undefined ? { cluster: options.cluster } : {};
    const { url } = await server.rpc.call("start", { redisUrl: options.redis ? ctx.redisUrl : undefined, ...cluster, ...(options.relays !== undefined && { relays: options.relays }), ...(options.store === true && { store: ctx.redisUrl }), ...(options.http2 === true && { http2: true }) });
    await publisher?.rpc.call("start", { redisUrl: ctx.redisUrl, ...cluster });
    const openMs = await fleet.open("raw", [url], keys);
    return {
      label,
      fleet,
      openMs,
      source: {
        emit: (plan) => {
          if (publisher === undefined) throw new Error("raw path started without a publisher");
          return publisher.rpc.call("emit", plan);
        },
        usage: () => (publisher === undefined ? server.rpc.call("usage", { gc: false }) : publisher.rpc.call("usage", { gc: false })),
      },
      serverUsage: async () => [await server.rpc.call("usage", { gc: false })],
      profiled: (_name, run) => run(),
      stop,
      rawUrl: url,
      memory: (gc) => server.rpc.call("usage", { gc }),
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

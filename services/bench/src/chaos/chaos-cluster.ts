/**
 * The fleet under test in a chaos variant, deployed as `npm run fleet` deploys it: brokers
 * (services/broker/dist/cli.js) and a worker (services/worker/dist/main.js) on
 * deploy/fleet.config.json — its backends replaced by the bench backend over Streamable HTTP, and
 * a key prefix of the run's own — HAProxy on a variant of deploy/haproxy.cfg, and Redis (the
 * machine's, or a redis-server of the harness that it can restart). Brokers can be SIGKILLed and
 * started again on the same port; each start is one incarnation, with its own log.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { deleteKeys } from "@mcp-broker/shared/testing";
import { BACKEND_ENV, type BackendApi, type HttpBackendProcessApi } from "../backend/backend-api.js";
import type { BackendControlServer } from "../backend/backend-control-server.js";
import { BACKEND_ID } from "../core/bench-uris.js";
import { nowMicros, pollUntil } from "../core/clock.js";
import type { ManagedChild, ProcessGroup } from "../core/process-group.js";
import type { RpcClient } from "../core/rpc.js";
import { BENCH_BACKEND_SCRIPT } from "../engines/bench-broker-config.js";
import { readJsonConfig } from "../fleet/fleet-config.js";
import type { Balancing } from "../fleet/haproxy-config.js";
import { startLoadBalancer, type LoadBalancer } from "../fleet/load-balancer.js";
import { startRedisServer, type LocalRedis } from "../fleet/local-redis.js";
import { startBroker, startWorker, type Member } from "../fleet/members.js";
import { freePort } from "../fleet/ports.js";
import { PATHS } from "../fleet/repo-paths.js";

/** The load balancer names the broker that answered in this response header (the variant's only addition to deploy/haproxy.cfg). */
export const SERVER_HEADER = "x-chaos-server";
/** The bench backend ends a session whose broker is gone (no notification stream) after this long. */
const BACKEND_SESSION_IDLE_MS = 15_000;

/** One run of a broker process. */
export interface Incarnation {
  pid: number;
  /** Its cluster instance id (/readyz), as the logs name members. */
  instance: string;
  log: string;
  startedMicros: number;
  readyMicros: number;
  killedMicros: number;
}

/** Broker slot i (HAProxy's `broker<i>`): its port and every process that ran on it. */
export interface BrokerSlot {
  readonly name: string;
  readonly port: number;
  member: Member | undefined;
  readonly incarnations: Incarnation[];
}

export interface ChaosClusterOptions {
  label: string;
  brokers: number;
  balancing: Balancing;
  /** The machine's Redis (a key prefix of the run's own, deleted at the end), or a redis-server of the harness (restartable). */
  redis: { url: string } | "own";
  logDir: string;
}

export class ChaosCluster {
  private constructor(
    readonly options: ChaosClusterOptions,
    private readonly group: ProcessGroup,
    readonly redisUrl: string,
    private ownRedis: LocalRedis | undefined,
    readonly keyPrefix: string,
    readonly configFile: string,
    readonly backend: RpcClient<BackendApi>,
    private readonly backendProcess: ManagedChild<HttpBackendProcessApi>,
    readonly worker: Member,
    readonly brokers: BrokerSlot[],
    readonly lb: LoadBalancer,
  ) {}

  /**
   * Deploys: the bench backend, broker 1 (left to take the backend's watcher lease, which the
   * worker, a preferred watcher, takes over from it after its first lease TTL: a handover before
   * the run), the worker (which loads the catalog the brokers wait for), the other brokers, then
   * HAProxy. On failure, stops what started.
   */
  static async deploy(deps: { group: ProcessGroup; control: BackendControlServer; log: (message: string) => void }, options: ChaosClusterOptions): Promise<ChaosCluster> {
    const { group, control, log } = deps;
    const stops: (() => Promise<void>)[] = [];
    const unwind = async (): Promise<void> => {
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
    };
    try {
      let ownRedis: LocalRedis | undefined;
      let redisUrl: string;
      if (options.redis === "own") {
        ownRedis = await startRedisServer(group, await freePort(), `redis-${options.label}`, log);
        const started = ownRedis;
        stops.push(() => started.child.stop());
        redisUrl = ownRedis.url;
      } else redisUrl = options.redis.url;
      const keyPrefix = `mcpb-chaos:${options.label}:${randomBytes(4).toString("hex")}:`;
      stops.push(() => deleteKeys(redisUrl, keyPrefix).catch(() => undefined));

      const arrives = control.next(60_000);
      arrives.catch(() => undefined);
      const backendProcess = group.fork<HttpBackendProcessApi>(BENCH_BACKEND_SCRIPT, `backend-${options.label}`, {
        env: { [BACKEND_ENV.controlPort]: String(control.port), [BACKEND_ENV.transport]: "http", [BACKEND_ENV.sessionIdleMs]: String(BACKEND_SESSION_IDLE_MS) },
      });
      stops.push(() => backendProcess.stop(() => backendProcess.rpc.call("stop", {})));
      const { url: backendUrl } = await backendProcess.rpc.call("listen", {});
      const backend = await arrives;

      // deploy/fleet.config.json as compose runs it, with the bench backend and the run's key prefix.
      const fleet = readJsonConfig(PATHS.fleetConfig);
      const config = { ...fleet, backends: [{ id: BACKEND_ID, url: backendUrl, era: "legacy" }], redis: { ...(fleet.redis as object | undefined), keyPrefix } };
      const configFile = join(options.logDir, "member.config.json");
      writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);

      const ports: number[] = [];
      for (let i = 0; i < options.brokers; i++) ports.push(await freePort());
      const brokers: BrokerSlot[] = ports.map((port, i) => ({ name: `broker${i + 1}`, port, member: undefined, incarnations: [] }));
      stops.push(async () => {
        await Promise.all(brokers.map((slot) => slot.member?.child.stop() ?? Promise.resolve()));
      });
      const first = ChaosCluster.startSlot(group, brokers[0] as BrokerSlot, configFile, redisUrl);
      first.catch(() => undefined);
      await pollUntil(async () => (await watching(`http://127.0.0.1:${ports[0] ?? 0}`)) === true, 30_000, "broker 1 to take the backend's watcher lease", 50);
      const worker = await startWorker(group, { tag: `worker-${options.label}`, configFile, port: await freePort(), redisUrl });
      stops.push(() => worker.child.stop());
      await first;
      await Promise.all(brokers.slice(1).map((slot) => ChaosCluster.startSlot(group, slot, configFile, redisUrl)));
      const lb = await startLoadBalancer(
        group,
        { bind: `127.0.0.1:${await freePort()}`, brokers: ports.map((port) => `127.0.0.1:${port}`), balancing: options.balancing, serverHeader: SERVER_HEADER, dir: options.logDir, name: `haproxy-${options.label}` },
        log,
      );
      return new ChaosCluster(options, group, redisUrl, ownRedis, keyPrefix, configFile, backend, backendProcess, worker, brokers, lb);
    } catch (error) {
      await unwind();
      throw error;
    }
  }

  private static async startSlot(group: ProcessGroup, slot: BrokerSlot, configFile: string, redisUrl: string): Promise<Member> {
    const startedMicros = nowMicros();
    const member = await startBroker(group, { tag: slot.name, configFile, port: slot.port, redisUrl });
    slot.member = member;
    const readyMicros = nowMicros();
    slot.incarnations.push({ pid: member.child.pid, instance: await instanceOf(`http://127.0.0.1:${slot.port}`), log: `${member.child.name}.log`, startedMicros, readyMicros, killedMicros: 0 });
    return member;
  }

  /** SIGKILLs broker `index` (0-based); resolves once it is gone. */
  async kill(index: number): Promise<{ atMicros: number }> {
    const slot = this.brokers[index] as BrokerSlot;
    const member = slot.member;
    if (member === undefined) throw new Error(`${slot.name} is not running`);
    const atMicros = nowMicros();
    const incarnation = slot.incarnations[slot.incarnations.length - 1];
    if (incarnation !== undefined) incarnation.killedMicros = atMicros;
    slot.member = undefined;
    await member.child.kill();
    return { atMicros };
  }

  /** Starts broker `index` again on its port; resolves once it is ready. */
  async restart(index: number): Promise<void> {
    await ChaosCluster.startSlot(this.group, this.brokers[index] as BrokerSlot, this.configFile, this.redisUrl);
  }

  /** Which members hold the backend's watcher lease now, by name. */
  async watchers(): Promise<string[]> {
    const members = [...this.brokers.filter((slot) => slot.member !== undefined).map((slot) => ({ name: slot.name, base: `http://127.0.0.1:${slot.port}` })), { name: "worker", base: this.worker.url }];
    const flags = await Promise.all(members.map(async (m) => ((await watching(m.base)) === true ? m.name : undefined)));
    return flags.filter((name): name is string => name !== undefined);
  }

  /** Each running broker's own count of legacy sessions and listen streams (`mcp_broker_sessions{era}` on its /metrics). */
  async sessionGauges(): Promise<{ name: string; legacy: number; modern: number }[]> {
    return Promise.all(
      this.brokers
        .filter((slot) => slot.member !== undefined)
        .map(async (slot) => {
          const text = await fetch(`http://127.0.0.1:${slot.port}/metrics`, { signal: AbortSignal.timeout(5_000) })
            .then((r) => r.text())
            .catch(() => "");
          const gauge = (era: string): number => sample(text, `mcp_broker_sessions{era="${era}"}`);
          return { name: slot.name, legacy: gauge("legacy"), modern: gauge("modern") };
        }),
    );
  }

  /** SIGKILLs the harness's own redis-server and starts it again, empty, on the same port. */
  async restartRedis(log: (message: string) => void): Promise<{ downMicros: number; upMicros: number }> {
    const redis = this.ownRedis;
    if (redis === undefined) throw new Error("this cluster runs on a Redis the harness did not start");
    const downMicros = nowMicros();
    await redis.child.kill();
    this.ownRedis = await startRedisServer(this.group, redis.port, `redis-${this.options.label}`, log);
    return { downMicros, upMicros: nowMicros() };
  }

  /** Stops HAProxy, the brokers, the worker (SIGTERM), the backend, the harness's Redis; deletes the run's keys. */
  async stop(): Promise<void> {
    await this.lb.child.stop();
    await Promise.all(this.brokers.map((slot) => slot.member?.child.stop() ?? Promise.resolve()));
    await this.worker.child.stop();
    await this.backendProcess.stop(() => this.backendProcess.rpc.call("stop", {}));
    if (this.ownRedis !== undefined) await this.ownRedis.child.stop();
    else await deleteKeys(this.redisUrl, this.keyPrefix).catch(() => undefined);
  }
}

/** The value of one sample (`name{labels}`) of a Prometheus text page; NaN when absent. */
function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}

/** The instance id the member at `base` reports on /readyz ("?" when it cannot be asked). */
export async function instanceOf(base: string): Promise<string> {
  try {
    const response = await fetch(new URL("/readyz", base), { signal: AbortSignal.timeout(2_000) });
    return ((await response.json()) as { instance?: string }).instance ?? "?";
  } catch {
    return "?";
  }
}

/** Whether the member at `base` says it watches the bench backend (its /readyz, ready or not); undefined when it cannot be asked. */
async function watching(base: string): Promise<boolean | undefined> {
  try {
    const response = await fetch(new URL("/readyz", base), { signal: AbortSignal.timeout(2_000) });
    const body = (await response.json()) as { backends?: { id?: string; watching?: boolean }[] };
    return body.backends?.some((b) => b.id === BACKEND_ID && b.watching === true) === true;
  } catch {
    return undefined;
  }
}

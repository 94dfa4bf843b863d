/**
 * What every engine does with its broker child processes (broker/broker-child.ts): start them, and
 * present one or more of them with their backend as a BrokerDeployment (URLs, usage, census and
 * diagnostics over all of them).
 */
import { join } from "node:path";
import type { BrokerConfigInput } from "@mcp-broker/shared";
import type { BackendApi } from "../backend/backend-api.js";
import type { BackendControlServer } from "../backend/backend-control-server.js";
import type { BrokerChildApi } from "../broker/broker-child-api.js";
import type { ManagedChild, ProcessGroup } from "../core/process-group.js";
import type { RpcClient } from "../core/rpc.js";
import type { BrokerDeployment, Diagnostics, EngineName } from "./broker-engine.js";

/** What an engine needs from the run. */
export interface EngineDeps {
  readonly group: ProcessGroup;
  readonly control: BackendControlServer;
  readonly diagnostics: Diagnostics;
}

/** A broker child, listening, its backend ready. */
export interface BrokerProcess {
  /** Names its log, profiles and heap snapshots: `broker-<tag>…`. */
  readonly tag: string;
  readonly url: string;
  readonly child: ManagedChild<BrokerChildApi>;
}

/** Forks a broker child, not started yet (its `start` call builds the broker). */
export function forkBrokerChild(deps: EngineDeps, tag: string): ManagedChild<BrokerChildApi> {
  const { cpuProfDir } = deps.diagnostics;
  const execArgv = ["--expose-gc"];
  if (cpuProfDir !== undefined) execArgv.push("--cpu-prof", `--cpu-prof-dir=${cpuProfDir}`, `--cpu-prof-name=broker-${tag}.cpuprofile`);
  return deps.group.fork<BrokerChildApi>(new URL("../broker/broker-child.js", import.meta.url), `broker-${tag}`, { execArgv });
}

/** Forks a broker child and starts it with `config`; a child that fails to start is stopped again. */
export async function startBrokerProcess(deps: EngineDeps, tag: string, config: BrokerConfigInput): Promise<BrokerProcess> {
  const child = forkBrokerChild(deps, tag);
  try {
    const { url } = await child.rpc.call("start", { config });
    return { tag, url, child };
  } catch (error) {
    await child.stop();
    throw error;
  }
}

/** Stops a broker child: its `stop` call first (a CPU profile is written at exit), then signals. */
export function stopBrokerProcess({ child }: BrokerProcess): Promise<void> {
  return child.stop(() => child.rpc.call("stop", {}));
}

/**
 * `brokers` (in the order of `urls`) fed by `backend`, as one deployment. Its `stop` stops every
 * broker, then runs `afterBrokers` (what else the engine started).
 */
export function brokerDeployment(
  engine: EngineName,
  brokers: readonly BrokerProcess[],
  backend: RpcClient<BackendApi>,
  diagnostics: Diagnostics,
  afterBrokers: () => Promise<void> = async () => undefined,
): BrokerDeployment {
  const { cpuProfDir, heapSnapshotDir, stepProfiles } = diagnostics;
  const each = <T>(call: (child: ManagedChild<BrokerChildApi>, tag: string) => Promise<T>): Promise<T[]> => Promise.all(brokers.map((b) => call(b.child, b.tag)));
  return {
    engine,
    urls: brokers.map((b) => b.url),
    backend,
    usage: (gc) => each((child) => child.rpc.call("usage", { gc })),
    census: () => each((child) => child.rpc.call("census", {})),
    loopDelay: (reset) => each((child) => child.rpc.call("loopDelay", { reset })),
    profiled: async (name, run) => {
      if (cpuProfDir === undefined) return run();
      await each((child) => child.rpc.call("profileStart", { intervalMicros: 250 }));
      try {
        return await run();
      } finally {
        const files = await each(async (child, tag) => {
          const file = join(cpuProfDir, `broker-${tag}-${name}.cpuprofile`);
          await child.rpc.call("profileStop", { file });
          return file;
        });
        stepProfiles.push(...files);
      }
    },
    heapSnapshot: async (name) => {
      if (heapSnapshotDir !== undefined) await each((child, tag) => child.rpc.call("heapSnapshot", { file: join(heapSnapshotDir, `broker-${tag}-${name}.heapsnapshot`) }));
    },
    stop: async () => {
      await Promise.all(brokers.map(stopBrokerProcess));
      await afterBrokers();
    },
  };
}

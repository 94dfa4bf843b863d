import { join } from "node:path";
import type { BackendControlServer } from "../backend/backend-control-server.js";
import type { BrokerChildApi } from "../broker/broker-child-api.js";
import type { ProcessGroup } from "../core/process-group.js";
import { benchBrokerConfig } from "./bench-broker-config.js";
import type { BrokerDeployment, BrokerEngine, Diagnostics } from "./broker-engine.js";

/** One broker process on the in-process memory engine; it starts its own bench backend over stdio. */
export class MemoryEngine implements BrokerEngine {
  readonly name = "memory";
  readonly unavailableReason = undefined;

  constructor(
    private readonly deps: { group: ProcessGroup; control: BackendControlServer; diagnostics: Diagnostics },
  ) {}

  async deploy(label: string, options: { debounceMs?: number } = {}): Promise<BrokerDeployment> {
    const { group, control } = this.deps;
    const { cpuProfDir, heapSnapshotDir, stepProfiles } = this.deps.diagnostics;
    const execArgv = ["--expose-gc"];
    if (cpuProfDir !== undefined) execArgv.push("--cpu-prof", `--cpu-prof-dir=${cpuProfDir}`, `--cpu-prof-name=broker-${label}.cpuprofile`);
    const child = group.fork<BrokerChildApi>(new URL("../broker/broker-child.js", import.meta.url), `broker-${label}`, { execArgv });
    try {
      const backendArrives = control.next(60_000);
      const { url } = await child.rpc.call("start", { config: benchBrokerConfig(control.port, options) });
      const backend = await backendArrives;
      return {
        engine: "memory",
        urls: [url],
        backend,
        usage: async (gc) => [await child.rpc.call("usage", { gc })],
        census: async () => [await child.rpc.call("census", {})],
        profiled: async (name, run) => {
          if (cpuProfDir === undefined) return run();
          await child.rpc.call("profileStart", { intervalMicros: 250 });
          try {
            return await run();
          } finally {
            const file = join(cpuProfDir, `broker-${label}-${name}.cpuprofile`);
            await child.rpc.call("profileStop", { file });
            stepProfiles.push(file);
          }
        },
        heapSnapshot: async (name) => {
          if (heapSnapshotDir !== undefined) await child.rpc.call("heapSnapshot", { file: join(heapSnapshotDir, `broker-${label}-${name}.heapsnapshot`) });
        },
        stop: () => child.stop(() => child.rpc.call("stop", {})),
      };
    } catch (error) {
      await child.stop();
      throw error;
    }
  }
}

import type { BackendApi } from "../backend/backend-api.js";
import type { RpcClient } from "../core/rpc.js";
import { benchBrokerConfig } from "./bench-broker-config.js";
import type { BrokerDeployment, BrokerEngine } from "./broker-engine.js";
import { brokerDeployment, startBrokerProcess, stopBrokerProcess, type EngineDeps } from "./broker-processes.js";

/** One broker process on the in-process memory engine; it starts its own bench backend over stdio. */
export class MemoryEngine implements BrokerEngine {
  readonly name = "memory";
  readonly description = "one broker process, which starts the bench backend as its stdio backend";
  readonly unavailableReason = undefined;

  constructor(private readonly deps: EngineDeps) {}

  async deploy(label: string, options: { debounceMs?: number } = {}): Promise<BrokerDeployment> {
    const { control } = this.deps;
    // The broker starts the backend, which then calls in on the control port.
    const backendArrives = control.next(60_000);
    backendArrives.catch(() => undefined);
    const broker = await startBrokerProcess(this.deps, label, benchBrokerConfig({ controlPort: control.port }, options));
    let backend: RpcClient<BackendApi>;
    try {
      backend = await backendArrives;
    } catch (error) {
      await stopBrokerProcess(broker);
      throw error;
    }
    return brokerDeployment("memory", [broker], backend, this.deps.diagnostics);
  }
}

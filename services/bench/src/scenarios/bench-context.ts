import type { BackendControlServer } from "../backend/backend-control-server.js";
import type { BenchPlan } from "../bench-plan.js";
import type { ProcessGroup } from "../core/process-group.js";
import type { BrokerEngine } from "../engines/broker-engine.js";
import type { RedisEngine } from "../engines/redis-engine.js";

/** What every scenario gets from the run. */
export interface BenchContext {
  readonly plan: BenchPlan;
  readonly group: ProcessGroup;
  readonly control: BackendControlServer;
  /** Engines to run scenarios 1–3 on (memory first); unavailable ones give "not run" rows. */
  readonly engines: readonly BrokerEngine[];
  /** The broker engine for the single-engine scenarios (4–6). */
  readonly memory: BrokerEngine;
  /** The Redis engine, whose clusters of brokers and workers scenarios 7–8 deploy. */
  readonly redis: RedisEngine;
  readonly redisUrl: string;
  /** Why the Redis baselines cannot run (Redis unreachable), or undefined. */
  readonly redisUnavailable: string | undefined;
  log(message: string): void;
}

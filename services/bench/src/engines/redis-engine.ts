import type { BrokerDeployment, BrokerEngine } from "./broker-engine.js";

/**
 * Placeholder for the Redis engine (two broker instances with REDIS_URL, sessions spread over
 * both). The broker has no Redis engine yet, so its rows are reported as not run, never estimated.
 */
export class RedisEngine implements BrokerEngine {
  readonly name = "redis";
  readonly unavailableReason = "no Redis engine in this version";

  async deploy(): Promise<BrokerDeployment> {
    throw new Error(this.unavailableReason);
  }
}

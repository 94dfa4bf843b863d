export interface BackoffPolicy {
  initialDelayMs: number;
  maxDelayMs: number;
  multiplier: number;
}

/**
 * Delay before reconnect attempt `attempt` (0-based): exponential, capped, with "equal jitter"
 * (half fixed, half random) so a fleet of brokers does not reconnect in lockstep.
 */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const exponential = policy.initialDelayMs * policy.multiplier ** Math.min(attempt, 32);
  const capped = Math.min(policy.maxDelayMs, exponential);
  return Math.round(capped / 2 + (capped / 2) * random());
}

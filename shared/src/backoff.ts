export interface BackoffPolicy {
  /** Delay before the first retry, in ms. */
  initialDelayMs: number;
  /** Upper bound of any delay, in ms. */
  maxDelayMs: number;
  /** Growth factor per attempt. */
  multiplier: number;
}

/**
 * Delay before retry `attempt` (0-based): exponential, capped, with "equal jitter" (half fixed,
 * half random) so that many clients of one restarted server do not come back in lockstep.
 * The result lies in [capped / 2, capped].
 */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const exponential = policy.initialDelayMs * policy.multiplier ** Math.min(attempt, 32);
  const capped = Math.min(policy.maxDelayMs, exponential);
  return Math.round(capped / 2 + (capped / 2) * random());
}

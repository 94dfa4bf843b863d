/**
 * Cross-process wall clock with sub-millisecond resolution: `performance.timeOrigin` is the wall
 * time at process start and `performance.now()` the monotonic time since, so two processes on
 * one machine agree to well under a millisecond. Latencies are computed across processes from it.
 */
export function nowMicros(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` every `everyMs` until it holds; throws after `timeoutMs`, naming `what` it waited for. */
export async function pollUntil(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string, everyMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/**
 * Deduplicated, delayed jobs. Contract: `schedule` with a key that is already waiting does not
 * add a second job (a burst gives one run); a key scheduled while its job runs gives exactly one
 * more run after it; runs of one key never overlap.
 */
export interface JobQueue<T> {
  schedule(key: string, data: T, delayMs: number): Promise<void>;
  process(handler: (key: string, data: T) => Promise<void>): void;
  /** Keys waiting or running. */
  pending(): Promise<string[]>;
  close(): Promise<void>;
}

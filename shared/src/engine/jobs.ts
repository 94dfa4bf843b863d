/**
 * Deduplicated, delayed jobs, run by whichever processing member takes them. Contract:
 * - `schedule` with a key that is already waiting does not add a second job (a burst gives one run);
 * - a key scheduled while its job runs gives exactly one more run after it, with the newest data;
 * - runs of one key never overlap;
 * - a run that throws is retried with exponential backoff (`JobQueueOptions`) until its attempts
 *   are used up; an `UnrecoverableJobError` (or a payload that does not decode) fails it at once.
 * The Redis queue adds: a job whose processing member died is taken over by another (stalled-job
 * recovery), so nothing scheduled is lost while any member processes jobs.
 */
export interface JobQueue<T> {
  schedule(key: string, data: T, delayMs: number): Promise<void>;
  /**
   * Schedules `key` (as `schedule(key, data, 0)` would) every `everyMs`, for the whole cluster: one
   * repetition per key however many members ask for it; asking again replaces it.
   */
  repeat(key: string, data: T, everyMs: number): Promise<void>;
  /** Ends the repetition of `key` (a run already scheduled still runs). */
  stopRepeat(key: string): Promise<void>;
  /** Starts running jobs in this process with `handler` (members configured to process jobs). */
  process(handler: (key: string, data: T) => Promise<void>): void;
  /**
   * The jobs `member` (an instance presumed dead) was running go back to waiting, for another member
   * to run now rather than once their locks lapse; resolves with how many. Nothing to do in one process.
   */
  reclaim(member: string): Promise<number>;
  /** Keys waiting, delayed or running (repetitions not counted). */
  pending(): Promise<string[]>;
  stats(): Promise<JobStats>;
  /**
   * Stops taking jobs and lets the running ones finish (within a grace period). `abandon`: Redis is
   * away, nothing graceful can reach it: the connections are dropped at once (the running jobs'
   * locks lapse and another member runs them).
   */
  close(options?: { abandon?: boolean }): Promise<void>;
}

export interface JobQueueOptions {
  /** Runs a job gets before it fails for good (1: no retry). */
  attempts: number;
  /** Delay before the first retry; each later one doubles it. */
  backoffMs: number;
}

export const DEFAULT_JOB_OPTIONS: JobQueueOptions = { attempts: 8, backoffMs: 500 };

/** Jobs by state; `failed` and `completed` count since this queue started (memory) or as retained (Redis). */
export interface JobStats {
  waiting: number;
  delayed: number;
  active: number;
  failed: number;
  completed: number;
}

/** How one run ended, for logs and metrics (`retry`: it failed and runs again after a backoff). */
export type JobOutcome = "completed" | "retry" | "failed";

/** Hears every run this process makes. */
export type JobObserver = (run: { key: string; outcome: JobOutcome; durationMs: number; error?: unknown }) => void;

/** Thrown by a handler (or the queue, for a payload that does not decode): fail the job now, never retry it. */
export class UnrecoverableJobError extends Error {
  override readonly name = "UnrecoverableJobError";
}

/**
 * Thrown by a handler that cannot run the job on this member while another may (its backend is
 * not connected here): on a queue shared by several members the job goes back to the queue without
 * using an attempt, for any member to take after a moment (at most `HAND_BACKS` times, then it is
 * an ordinary failure); on a member's own queue it is an ordinary failure.
 */
export class ElsewhereJobError extends Error {
  override readonly name = "ElsewhereJobError";
}

/** How often a job may be handed back (`ElsewhereJobError`), and after how long another member may take it again. */
export const HAND_BACKS = 20;
export const HAND_BACK_MS = 500;

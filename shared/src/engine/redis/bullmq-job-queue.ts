import { randomUUID } from "node:crypto";
import { DelayedError, isNotConnectionError, Job, Queue, UnrecoverableError, Worker } from "bullmq";
import type { RedisClient } from "./redis-client.js";
import { within } from "../../clock.js";
import { ElsewhereJobError, HAND_BACK_MS, HAND_BACKS, UnrecoverableJobError, type JobObserver, type JobQueue, type JobQueueOptions, type JobStats } from "../jobs.js";

/** The job names on the queue: a job to run, and the trigger a repetition adds. */
const RUN = "run";
const REPEAT = "repeat";
/** Finished jobs kept for inspection (and for `stats`), newest first. */
const KEEP_COMPLETED = 100;
const KEEP_FAILED = 1_000;
/** How long `close` lets the jobs this process runs finish before it abandons them to another member. */
const CLOSE_GRACE_MS = 5_000;

interface Envelope {
  /** Times members handed the job back (`ElsewhereJobError`). */
  handedBack?: number;
  key: string;
  data: unknown;
}

export interface BullJobQueueOptions<T> extends JobQueueOptions {
  /** Makes a connection for BullMQ (its commands must wait out a Redis restart: `maxRetriesPerRequest: null`). */
  connect: () => RedisClient;
  /** BullMQ's key prefix (see `RedisKeys.jobs`). */
  prefix: string;
  name: string;
  /** Validates a payload read from Redis; throws when it is not a `T` (the job then fails without retry). */
  decode: (data: unknown) => T;
  /** This member's instance id: the jobs it runs carry it, so that `reclaim` finds them once it died. */
  owner?: string;
  /** Jobs one member runs at once (of different keys: a key never runs twice at once). */
  concurrency?: number;
  /**
   * How long a running job's lock lasts without renewal (renewed at half of it). A member that
   * stops renewing it loses the job to another member within about twice this (see `reclaim` for
   * one found dead).
   */
  lockMs?: number;
  onError?: (key: string, error: unknown, final: boolean) => void;
  /** Taking jobs failed other than for a lost connection: the worker takes none for `pauseMs` (see `BullJobQueue.backOff`). */
  onFetchError?: (error: Error, pauseMs: number) => void;
  onRun?: JobObserver;
}

/**
 * `JobQueue` on BullMQ. Each key is one BullMQ deduplication id with `keepLastIfActive`: adding a
 * key that waits is dropped (a burst gives one run), adding it while its job runs stores the newest
 * data and BullMQ adds exactly one job when the running one finishes (so runs of a key never
 * overlap). Retries are BullMQ's (exponential backoff); a job whose member died is reclaimed once
 * the cluster finds it dead, or found stalled by the other members' workers, and runs again.
 * Repetitions are BullMQ job schedulers, one per key for the cluster, whose jobs only schedule the
 * key (so a slow run never overlaps the next).
 */
/** How long fetching pauses after the worker's first error, and at most (see `BullJobQueue.backOff`). */
const FETCH_BACKOFF_MIN_MS = 250;
const FETCH_BACKOFF_MAX_MS = 5_000;
/** Errors this far apart start the backoff over. */
const FETCH_BACKOFF_RESET_MS = 10_000;

export class BullJobQueue<T> implements JobQueue<T> {
  private readonly queue: Queue;
  private readonly connections: RedisClient[] = [];
  private worker: Worker | undefined;
  private closing = false;
  /** While set, the worker fetches no job (see `backOff`). */
  private fetchPause: NodeJS.Timeout | undefined;
  private fetchBackoffMs = FETCH_BACKOFF_MIN_MS;
  private lastFetchError = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: BullJobQueueOptions<T>) {
    this.queue = new Queue(options.name, { connection: this.connection(), prefix: options.prefix });
    // Errors are reported per command (schedule, stats); the event would otherwise be unhandled.
    this.queue.on("error", () => undefined);
  }

  async schedule(key: string, data: T, delayMs: number): Promise<void> {
    const jobId = randomUUID();
    const added = await this.queue.add(RUN, { key, data } satisfies Envelope, {
      jobId,
      delay: delayMs,
      deduplication: { id: key, keepLastIfActive: true },
      attempts: this.options.attempts,
      backoff: { type: "exponential", delay: this.options.backoffMs },
      removeOnComplete: { count: KEEP_COMPLETED },
      removeOnFail: { count: KEEP_FAILED },
    });
    if (added.id === jobId || added.id === undefined) return;
    // Deduplicated into the key's job. One waiting out a failed run's backoff (up to minutes) would
    // hold this schedule up as long: it runs at this schedule's time instead, with its data.
    // (One whose backoff ends sooner than this delay waits this delay now: at most a debounce more.)
    const pending = await Job.fromId<Envelope>(this.queue, added.id);
    if (pending === undefined || pending.attemptsMade === 0 || !(await pending.isDelayed())) return;
    await pending.updateData({ key, data });
    await pending.changeDelay(delayMs).catch(() => undefined); // it left the delayed set meanwhile: it runs anyway
  }

  async repeat(key: string, data: T, everyMs: number): Promise<void> {
    await this.queue.upsertJobScheduler(`${REPEAT}:${key}`, { every: everyMs }, {
      name: REPEAT,
      data: { key, data } satisfies Envelope,
      opts: { removeOnComplete: { count: KEEP_COMPLETED }, removeOnFail: { count: KEEP_FAILED } },
    });
  }

  async stopRepeat(key: string): Promise<void> {
    await this.queue.removeJobScheduler(`${REPEAT}:${key}`);
  }

  process(handler: (key: string, data: T) => Promise<void>): void {
    if (this.worker !== undefined) throw new Error("this queue already has a handler");
    const lockMs = this.options.lockMs ?? 30_000;
    this.worker = new Worker(this.options.name, (job, token) => this.run(job, handler, token), {
      ...(this.options.owner !== undefined && { name: this.options.owner }),
      connection: this.connection(),
      prefix: this.options.prefix,
      concurrency: this.options.concurrency ?? 8,
      lockDuration: lockMs,
      stalledInterval: lockMs,
      // A member that died mid-job loses its job to another, as often as members die: never failed for it.
      maxStalledCount: Number.MAX_SAFE_INTEGER,
      // After a Redis outage the worker takes jobs again within a second, not BullMQ's default 15 s.
      runRetryDelay: 1_000,
    });
    this.worker.on("error", (error) => this.backOff(error));
  }

  /**
   * BullMQ's worker waits before asking again only when Redis is unreachable: when Redis answers
   * its fetch with another error (out of memory under `noeviction`, a script refused), it asks
   * again at once, thousands of times a second, a core busy for as long as it lasts. Any such error
   * pauses fetching (running jobs go on) for 250 ms, doubling while errors keep coming, up to 5 s.
   */
  private backOff(error: Error): void {
    const worker = this.worker;
    if (worker === undefined || this.closing || this.fetchPause !== undefined || !isNotConnectionError(error)) return;
    const now = Date.now();
    this.fetchBackoffMs = now - this.lastFetchError < FETCH_BACKOFF_RESET_MS ? Math.min(FETCH_BACKOFF_MAX_MS, this.fetchBackoffMs * 2) : FETCH_BACKOFF_MIN_MS;
    this.lastFetchError = now;
    this.options.onFetchError?.(error, this.fetchBackoffMs);
    void worker.pause(true).catch(() => undefined);
    this.fetchPause = setTimeout(() => {
      this.fetchPause = undefined;
      if (!this.closing) void worker.resume().catch(() => undefined);
    }, this.fetchBackoffMs);
    this.fetchPause.unref();
  }

  /**
   * Without this a dead member's job waits for its lock to lapse and a stalled-job check (up to
   * twice `lockMs`), and its key's later runs (deduplicated) wait with it: a member that died
   * during a reap held up the cluster's reaping that long. BullMQ moves a job back without its
   * lock when no token is given; a member wrongly presumed dead then finds its lock taken.
   */
  async reclaim(member: string): Promise<number> {
    let moved = 0;
    for (const job of await this.queue.getJobs(["active"])) {
      if (job.processedBy !== member) continue;
      try {
        await job.moveToWait();
        moved++;
      } catch {
        // Gone meanwhile (finished and removed). One another member moved back at the same time
        // is counted by both: the count only goes into a log line.
      }
    }
    return moved;
  }

  async pending(): Promise<string[]> {
    const jobs = await this.queue.getJobs(["waiting", "delayed", "active", "prioritized"]);
    return [...new Set(jobs.filter((job) => job.name === RUN).map((job) => (job.data as Envelope).key))];
  }

  async stats(): Promise<JobStats> {
    const counts = await this.queue.getJobCounts("waiting", "prioritized", "delayed", "active", "failed", "completed");
    return {
      waiting: (counts.waiting ?? 0) + (counts.prioritized ?? 0),
      delayed: counts.delayed ?? 0,
      active: counts.active ?? 0,
      failed: counts.failed ?? 0,
      completed: counts.completed ?? 0,
    };
  }

  /**
   * Stops taking jobs; the ones running get `CLOSE_GRACE_MS` to finish, then go back to the queue
   * for another member (`reclaim` of this member's own: left to stalled-job recovery, a job and
   * its key's later runs waited up to twice `lockMs`, and a reap held up that long delayed the
   * release of every expired session). Bounded also while Redis is away: the connections are dropped.
   */
  async close(options: { abandon?: boolean } = {}): Promise<void> {
    this.closing = true;
    clearTimeout(this.fetchPause);
    const worker = this.worker;
    if (options.abandon === true) {
      for (const connection of this.connections) connection.disconnect();
      void worker?.close(true).catch(() => undefined);
      void this.queue.close().catch(() => undefined);
      return;
    }
    const graceful = (async () => {
      await worker?.close();
      await this.queue.close();
    })().then(
      () => true,
      () => true,
    );
    if (!(await within(graceful, CLOSE_GRACE_MS, false))) {
      void worker?.close(true).catch(() => undefined);
      if (this.options.owner !== undefined) await within(this.reclaim(this.options.owner).catch(() => 0), CLOSE_GRACE_MS, 0);
    }
    for (const connection of this.connections) connection.disconnect();
  }

  private connection(): RedisClient {
    const connection = this.options.connect();
    this.connections.push(connection);
    return connection;
  }

  private async run(job: Job, handler: (key: string, data: T) => Promise<void>, token?: string): Promise<void> {
    const envelope = job.data as Partial<Envelope> | undefined;
    const key = typeof envelope?.key === "string" ? envelope.key : `job ${job.id ?? "?"}`;
    const started = Date.now();
    try {
      if (typeof envelope?.key !== "string") throw new UnrecoverableJobError("the job has no key");
      let data: T;
      try {
        data = this.options.decode(envelope.data);
      } catch (error) {
        throw new UnrecoverableJobError(`the job's payload does not decode: ${(error as Error).message}`);
      }
      if (job.name === REPEAT) await this.schedule(envelope.key, data, 0);
      else await handler(envelope.key, data);
    } catch (error) {
      const handedBack = envelope?.handedBack ?? 0;
      if (error instanceof ElsewhereJobError && handedBack < HAND_BACKS && token !== undefined) {
        // Not this member's to run now, another's may be: back to the queue, no attempt used.
        await job.updateData({ ...envelope, handedBack: handedBack + 1 });
        await job.moveToDelayed(Date.now() + HAND_BACK_MS, token);
        throw new DelayedError();
      }
      const unrecoverable = error instanceof UnrecoverableJobError;
      const final = unrecoverable || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      this.options.onError?.(key, error, final);
      this.options.onRun?.({ key, outcome: final ? "failed" : "retry", durationMs: Date.now() - started, error });
      throw unrecoverable ? new UnrecoverableError((error as Error).message) : error;
    }
    this.options.onRun?.({ key, outcome: "completed", durationMs: Date.now() - started });
  }
}

import { SdkErrorCode, SdkHttpError, type FetchLike, type ReconnectionScheduler } from "@modelcontextprotocol/client";
import type { Clock, TimerHandle } from "@mcp-broker/shared";

/**
 * Watches the standalone GET stream of a legacy Streamable HTTP backend, where every unsolicited
 * notification (`resources/updated`, `list_changed`) arrives.
 *
 * The SDK transport reopens a dropped stream by itself but, after `maxRetries`, gives up silently:
 * it only passes a plain `Error` to `onerror`. So the transport is given this watch as its
 * `reconnectionScheduler` (and a higher `maxRetries` as a backstop): retries run on the injected
 * clock, and the attempt that would exceed `maxAttempts` declares the stream lost instead. The
 * first GET, which the SDK never retries, is lost when it fails to open (`SdkHttpError` with
 * `ClientHttpFailedToOpenStream` while no retry is under way).
 *
 * A reopen the SDK manages by itself is a gap all the same: the backend does not queue what it
 * could not send while no stream was open. The transport's `fetch` (wrapped by this watch's `wrap`) sees the
 * GET that opens the stream again; once a retry was scheduled, that GET fires `onReopened`.
 *
 * Contract: `onLost` fires at most once per watch, on the clock's turn or synchronously from the
 * transport; whoever owns the connection treats it as a drop (a full reconnect re-subscribes).
 * `onReopened` fires once per gap (retries scheduled since the stream was last open), after the
 * backend answered the GET with an event stream, so whatever the backend sends from then on arrives.
 * A retry the transport schedules for a request's own SSE stream (a resumption GET) counts as a gap
 * too: an extra reload and `updated` is harmless, a missed one is not.
 */
export class NotificationStreamWatch {
  /** The SDK has scheduled a reopen at least once: the first GET is over (a failed GET from now on is one more attempt). */
  private retrying = false;
  /** A reopen was scheduled and no GET stream has opened since. */
  private gap = false;
  private timer: TimerHandle | undefined;
  private lostReason: string | undefined;
  private listener: ((reason: string) => void) | undefined;
  private reopenedListener: (() => void) | undefined;
  private disposed = false;

  constructor(private readonly deps: { clock: Clock; maxAttempts: number }) {}

  /** For the transport's `reconnectionScheduler` option. */
  readonly scheduler: ReconnectionScheduler = (reconnect, delay, attemptCount) => {
    if (this.disposed) return;
    if (attemptCount >= this.deps.maxAttempts) {
      this.lose(`the notification stream could not be reopened after ${attemptCount} attempts`);
      return;
    }
    this.retrying = true;
    this.gap = true;
    const timer = this.deps.clock.setTimeout(() => {
      this.timer = undefined;
      if (!this.disposed) reconnect();
    }, delay);
    timer.unref?.();
    this.timer = timer;
    return () => {
      this.deps.clock.clearTimeout(timer);
      if (this.timer === timer) this.timer = undefined;
    };
  };

  /** For the transport's `fetch` option: `inner`, through which every request passes unchanged; a GET that opens an event stream ends a gap. */
  wrap(inner: FetchLike): FetchLike {
    return async (url, init) => {
      const response = await inner(url, init);
      if (init?.method === "GET" && response.ok && response.headers.get("content-type")?.startsWith("text/event-stream") === true) this.opened();
      return response;
    };
  }

  /** Feed every transport error here (`client.onerror`). */
  observe(error: Error): void {
    if (this.retrying || !(error instanceof SdkHttpError) || error.code !== SdkErrorCode.ClientHttpFailedToOpenStream) return;
    this.lose(`the notification stream did not open: ${error.message}`);
  }

  /** Calls `listener` once when the stream is lost (at once if it already is). */
  onLost(listener: (reason: string) => void): void {
    this.listener = listener;
    if (this.lostReason !== undefined) listener(this.lostReason);
  }

  /** Calls `listener` each time the stream is open again after a gap (not for gaps that ended before it was registered). */
  onReopened(listener: () => void): void {
    this.reopenedListener = listener;
  }

  dispose(): void {
    this.disposed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.listener = undefined;
    this.reopenedListener = undefined;
  }

  private opened(): void {
    if (!this.gap || this.disposed || this.lostReason !== undefined) return;
    this.gap = false;
    this.reopenedListener?.();
  }

  private lose(reason: string): void {
    if (this.lostReason !== undefined || this.disposed) return;
    this.lostReason = reason;
    this.listener?.(reason);
  }
}

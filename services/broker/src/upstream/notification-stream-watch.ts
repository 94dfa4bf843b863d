import { SdkErrorCode, SdkHttpError, type ReconnectionScheduler } from "@modelcontextprotocol/client";
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
 * Contract: `onLost` fires at most once per watch, on the clock's turn or synchronously from the
 * transport; whoever owns the connection treats it as a drop (a full reconnect re-subscribes).
 */
export class NotificationStreamWatch {
  private retrying = false;
  private timer: TimerHandle | undefined;
  private lostReason: string | undefined;
  private listener: ((reason: string) => void) | undefined;
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

  dispose(): void {
    this.disposed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.listener = undefined;
  }

  private lose(reason: string): void {
    if (this.lostReason !== undefined || this.disposed) return;
    this.lostReason = reason;
    this.listener?.(reason);
  }
}

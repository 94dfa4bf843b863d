import { ProtocolError, type McpSubscription, type SubscriptionFilter } from "@modelcontextprotocol/client";
import type { Clock, TimerHandle } from "@mcp-broker/shared";
import { backoffDelay, type BackoffPolicy } from "@mcp-broker/shared";
import type { Connection } from "../connection/connection.js";
import { BrokerClientError } from "../errors.js";
import { SerialQueue } from "../util/serial-queue.js";
import type { SubscriptionChannel } from "./subscription-channel.js";

export interface ListenStreamDeps {
  clock: Clock;
  random: () => number;
  /** Delays between attempts to reopen a stream that dropped. */
  retry: BackoffPolicy;
  /** The stream dropped, or could not be reopened: whoever owns the connection checks the server. */
  dropped(): void;
  /** A dropped stream is open again: notifications sent in between were lost. */
  reopened(): void;
}

type StreamState =
  /** `subscription` is undefined while the filter is empty: then no stream is needed. */
  | { readonly kind: "open"; readonly subscription: McpSubscription | undefined }
  | { readonly kind: "dropped"; readonly attempt: number; readonly timer: TimerHandle }
  | { readonly kind: "closed" };

/**
 * The one `subscriptions/listen` stream of a modern (2026-07-28) connection. Its filter is the
 * connection's list-change flags plus the subscribed URIs, so each change of the set replaces the
 * stream: the new one is opened (and acknowledged) before the old one is closed; an overlap may
 * deliver an update twice, a gap could lose one.
 *
 * A stream the server ends (or that breaks) is reopened with the same filter after a backoff
 * delay, again and again until it opens or the channel is closed; `dropped` is reported at each
 * failure and `reopened` once it is back. All openings are serialized.
 */
export class ListenStream implements SubscriptionChannel {
  private state: StreamState = { kind: "open", subscription: undefined };
  /** The URIs of the last filter that was opened (or is being reopened). */
  private uris: readonly string[] = [];
  private readonly queue = new SerialQueue();

  constructor(
    private readonly connection: Connection,
    /** The list-change flags of the filter; fixed for the connection. */
    private readonly flags: SubscriptionFilter,
    private readonly deps: ListenStreamDeps,
  ) {}

  async add(uri: string, current: readonly string[]): Promise<void> {
    const honored = await this.apply([...current, uri]);
    if (!honored.has(uri)) {
      throw new BrokerClientError("SUBSCRIPTION_REFUSED", `The server did not honor the subscription to ${uri}.`, { uri });
    }
  }

  async remove(_uri: string, remaining: readonly string[]): Promise<void> {
    await this.apply(remaining);
  }

  async restore(uris: readonly string[]): Promise<Map<string, unknown>> {
    const refused = new Map<string, unknown>();
    let wanted = [...uris];
    for (;;) {
      try {
        const honored = await this.apply(wanted);
        for (const uri of wanted) {
          if (!honored.has(uri)) refused.set(uri, new BrokerClientError("SUBSCRIPTION_REFUSED", `The server did not honor the subscription to ${uri}.`, { uri }));
        }
        return refused;
      } catch (error) {
        // One unknown URI rejects the whole listen request; the error names it (data.uri).
        const uri = rejectedUri(error, wanted);
        if (uri === undefined) throw error;
        refused.set(uri, error);
        wanted = wanted.filter((candidate) => candidate !== uri);
      }
    }
  }

  /**
   * Ends the stream at once (its request is aborted, which ends the subscription on the server);
   * the `notifications/cancelled` that follows is not waited for, so a dead server cannot hold
   * the caller up.
   */
  async close(): Promise<void> {
    const state = this.state;
    this.state = { kind: "closed" };
    if (state.kind === "dropped") this.deps.clock.clearTimeout(state.timer);
    if (state.kind === "open") void state.subscription?.close().catch(() => undefined);
  }

  private apply(uris: readonly string[]): Promise<Set<string>> {
    return this.queue.run(() => this.open(uris));
  }

  /** Opens a stream for `uris`, then closes the previous one. Resolves with the honored URIs. */
  private async open(uris: readonly string[]): Promise<Set<string>> {
    if (this.isClosed()) throw notConnected();
    const filter = this.filterFor(uris);
    const next = Object.keys(filter).length === 0 ? undefined : await this.connection.request((client, options) => client.listen(filter, options));
    const previous = this.state;
    if (previous.kind === "closed") {
      await next?.close().catch(() => undefined);
      throw notConnected();
    }
    if (previous.kind === "dropped") this.deps.clock.clearTimeout(previous.timer);
    this.state = { kind: "open", subscription: next };
    this.uris = uris;
    if (next !== undefined) this.watch(next);
    if (previous.kind === "open") await previous.subscription?.close().catch(() => undefined);
    if (previous.kind === "dropped") this.deps.reopened();
    return new Set(next?.honoredFilter.resourceSubscriptions ?? []);
  }

  private isClosed(): boolean {
    return this.state.kind === "closed";
  }

  private filterFor(uris: readonly string[]): SubscriptionFilter {
    return { ...this.flags, ...(uris.length > 0 && { resourceSubscriptions: [...uris] }) };
  }

  private watch(subscription: McpSubscription): void {
    void subscription.closed.then((how) => {
      if (how === "local" || this.state.kind !== "open" || this.state.subscription !== subscription) return;
      this.scheduleReopen(0);
      this.deps.dropped();
    });
  }

  private scheduleReopen(attempt: number): void {
    const delay = backoffDelay(this.deps.retry, attempt, this.deps.random);
    const timer = this.deps.clock.setTimeout(() => void this.reopen(attempt), delay);
    this.state = { kind: "dropped", attempt, timer };
  }

  private async reopen(attempt: number): Promise<void> {
    try {
      await this.queue.run(async () => {
        // An add or remove may have reopened it meanwhile.
        if (this.state.kind === "dropped") await this.open(this.uris);
      });
    } catch {
      if (this.state.kind !== "dropped" || this.state.attempt !== attempt) return;
      this.scheduleReopen(attempt + 1);
      this.deps.dropped();
    }
  }
}

function notConnected(): BrokerClientError {
  return new BrokerClientError("NOT_CONNECTED", "The connection this listen stream belongs to is closed.");
}

function rejectedUri(error: unknown, candidates: readonly string[]): string | undefined {
  if (!(error instanceof ProtocolError) || typeof error.data !== "object" || error.data === null) return undefined;
  const uri = (error.data as { uri?: unknown }).uri;
  return typeof uri === "string" && candidates.includes(uri) ? uri : undefined;
}

import { ProtocolError, type McpSubscription, type SubscriptionFilter } from "@modelcontextprotocol/client";
import { backoffDelay, type BackoffPolicy, type Clock, type TimerHandle } from "@mcp-broker/shared";
import type { Connection } from "../connection/connection.js";
import type { RefusalReason } from "../connection/listen-cursor.js";
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
  /**
   * The server stopped honoring subscribed URIs outside a call about them (on a reopen, or when
   * another URI was added or removed): they are out of the stream from now on, and the values
   * say why. Reported before the `reopened` of the same opening.
   */
  refused(refused: ReadonlyMap<string, unknown>): void;
  /** A dropped stream is open again: notifications sent in between were lost. */
  reopened(): void;
  /**
   * The server refused the stream itself (such as the principal's session limit): nothing it would
   * carry is heard until a reopen, after a backoff, succeeds.
   */
  streamRefused(error: ProtocolError): void;
  /**
   * Whether the stream just acknowledged resumed exactly where the last one left off (the server
   * sends what changed in between, so nothing was lost). Asked once per acknowledged stream.
   */
  resumedExactly(): boolean;
  /** Why the stream just acknowledged left URIs out, where the server said (see `ListenCursor.takeRefusals`). Asked once per acknowledged stream. */
  refusals(): ReadonlyMap<string, RefusalReason>;
  /** Whether the next streams opened ask to resume from the last cursor (see `ListenCursor.resume`). */
  resume(on: boolean): void;
}

/**
 * A stream that stayed open this long resets the backoff of reopening; one that ends sooner
 * carries the backoff on, so a server that ends each stream right after accepting it is not asked
 * again and again at the shortest delay (each reopening reloads every list).
 */
export const STABLE_STREAM_MS = 5_000;

type OpenStream = {
  readonly kind: "open";
  /** Undefined while the filter is empty: then no stream is needed. */
  readonly subscription: McpSubscription | undefined;
  /** When it was opened (clock time). */
  readonly since: number;
  /** The backoff attempt of its reopening should it end before it is stable. */
  readonly attempt: number;
};

type StreamState = OpenStream | { readonly kind: "dropped"; readonly attempt: number; readonly timer: TimerHandle } | { readonly kind: "closed" };

/** The stream now in place, and whether it ended a drop. */
interface Opening {
  readonly honored: Set<string>;
  readonly reopened: boolean;
  /** Whether it resumed exactly from the last cursor (the server sent what changed meanwhile). */
  readonly resumed: boolean;
  /** The server's reasons for URIs it left out, where it gave them. */
  readonly refusals: ReadonlyMap<string, RefusalReason>;
}

/**
 * Which of `wanted` to leave out after the server rejected a listen request for all of them;
 * none gives up (the rejection is thrown).
 */
type Culprits = (error: ProtocolError, wanted: readonly string[]) => readonly string[];

/** The URI the rejection names (`data.uri`), if any. */
const named: Culprits = (error, wanted) => {
  const uri = rejectedUri(error, wanted);
  return uri === undefined ? [] : [uri];
};

/** The URI the rejection names; all of them when it names none (retried one by one later, which isolates the culprit). */
const namedOrAll: Culprits = (error, wanted) => {
  const uri = rejectedUri(error, wanted);
  return uri === undefined ? wanted : [uri];
};

/**
 * The one `subscriptions/listen` stream of a modern (2026-07-28) connection. Its filter is the
 * connection's list-change flags plus the subscribed URIs, so each change of the set replaces the
 * stream: the new one is opened and acknowledged, then the old one is closed without waiting for
 * its cancel to go through. From the acknowledgement on, updates arrive on the new stream; during
 * the overlap an update may arrive twice, never not at all.
 *
 * `uris` is the channel's view of the server side: the URIs of the open stream that the server
 * honors, which is also what a reopen asks for. A refused add leaves it as it was; a failed remove
 * still takes the URI out (the old stream may go on sending its updates until it is replaced, for
 * the caller to ignore), so no later opening asks for it again.
 *
 * One URI the server no longer knows makes it reject the whole listen request, naming the URI in
 * `data.uri`. Whatever the opening (restore, reopen, add or remove), that URI is left out and the
 * rest tried again; a restore or reopen whose rejection names none leaves them all out, so that
 * the stream still carries the list changes. URIs left out that way, or left out of the honored
 * subset, are refused: a restore returns them, the other openings report them through `refused`
 * (all but the URI an add is about, whose refusal it throws).
 *
 * A stream the server ends (or that breaks) is reopened after a backoff delay, again and again
 * until it opens or the channel is closed; `dropped` is reported at each failure and `reopened`
 * once it is back. The backoff starts over only once a stream has stayed open
 * `STABLE_STREAM_MS`. All openings are serialized.
 */
export class ListenStream implements SubscriptionChannel {
  private state: StreamState;
  private uris: readonly string[] = [];
  /**
   * Whether the next opening continues a stream that is gone (restored on a new connection,
   * reopened after a drop), so asks to resume from the last cursor; an opening that replaces an
   * open stream, or one opened when none was needed, starts afresh.
   */
  private continuing = false;
  /** Whether the last restore resumed exactly where the previous connection's stream left off. */
  private restoredExactly = false;
  private readonly queue = new SerialQueue();

  constructor(
    private readonly connection: Connection,
    /** The list-change flags of the filter; fixed for the connection. */
    private readonly flags: SubscriptionFilter,
    private readonly deps: ListenStreamDeps,
  ) {
    this.state = { kind: "open", subscription: undefined, since: deps.clock.now(), attempt: 0 };
  }

  add(uri: string, current: readonly string[]): Promise<void> {
    return this.queue.run(async () => {
      // Another URI that the server no longer knows must not keep this one out.
      const { honored, refusals } = await this.replace([...current, uri], named, uri);
      // Left out of `uris` then: the new stream serves what the old one did.
      if (!honored.has(uri)) throw refusedError(uri, refusals.get(uri));
    });
  }

  remove(uri: string, remaining: readonly string[]): Promise<void> {
    return this.queue.run(async () => {
      try {
        await this.replace(remaining, named);
      } catch (error) {
        this.uris = this.uris.filter((candidate) => candidate !== uri);
        throw error;
      }
    });
  }

  /**
   * Establishes `uris` on the fresh stream, leaving out those the server refuses (see the class
   * comment). A server that refuses even a stream without URIs is treated like a dropped stream:
   * reopened with backoff, the connection kept. Rejects only when the server did not answer.
   */
  restore(uris: readonly string[]): Promise<Map<string, unknown>> {
    return this.queue.run(async () => {
      const refused = new Map<string, unknown>();
      this.continuing = true;
      this.restoredExactly = false;
      try {
        this.restoredExactly = (await this.openRefusing(uris, namedOrAll, refused)).resumed;
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        this.deps.streamRefused(error);
        this.drop(0);
      }
      return refused;
    });
  }

  /**
   * Whether the last `restore` resumed exactly where the previous connection's stream left off:
   * the server sent what changed in between, so nothing needs re-checking.
   */
  get resumedExactly(): boolean {
    return this.restoredExactly;
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

  /**
   * `openRefusing` for an add, a remove or a reopen: the URIs refused other than `own` are
   * reported (also when the opening failed in the end), then a reopening. Resolves with the
   * opening (the honored URIs, and the server's reasons for the others).
   */
  private async replace(uris: readonly string[], culprits: Culprits, own?: string): Promise<Opening> {
    const refused = new Map<string, unknown>();
    let reopened = false;
    try {
      const opening = await this.openRefusing(uris, culprits, refused, own);
      reopened = opening.reopened;
      return opening;
    } finally {
      if (own !== undefined) refused.delete(own);
      if (refused.size > 0) this.deps.refused(refused);
      if (reopened) this.deps.reopened();
    }
  }

  /**
   * Opens a stream for `uris` without those the server refuses: after each rejection `culprits`
   * picks the URIs to leave out (never `own`) and the rest is tried again; when it picks none, the
   * rejection is thrown. The refused URIs (left out, or not honored) go into `refused` with the
   * reason, and leave `uris` as soon as they are known, so no later opening asks for them even if
   * this one fails. Run in the queue only.
   */
  private async openRefusing(uris: readonly string[], culprits: Culprits, refused: Map<string, unknown>, own?: string): Promise<Opening> {
    let wanted = [...uris];
    for (;;) {
      let opening: Opening;
      try {
        opening = await this.open(wanted);
      } catch (error) {
        const out = error instanceof ProtocolError ? culprits(error, wanted).filter((uri) => uri !== own) : [];
        if (out.length === 0) throw error;
        for (const uri of out) refused.set(uri, error);
        wanted = wanted.filter((uri) => !out.includes(uri));
        this.uris = this.uris.filter((uri) => !out.includes(uri));
        continue;
      }
      for (const uri of wanted) if (!opening.honored.has(uri)) refused.set(uri, refusedError(uri, opening.refusals.get(uri)));
      return opening;
    }
  }

  /**
   * Opens a stream for `uris` and puts it in place of the previous one, which is closed without
   * waiting; `uris` becomes the honored ones of them. Run in the queue only.
   */
  private async open(uris: readonly string[]): Promise<Opening> {
    if (this.isClosed()) throw notConnected();
    // URIs added while the stream was away: a resumption would report them updated (their watches
    // began after the cursor). It resumes with what it held, then grows without a resumption.
    if (this.state.kind === "dropped" && !this.continuing && uris.some((uri) => !this.uris.includes(uri))) {
      const resumed = await this.open(this.uris.filter((uri) => uris.includes(uri)));
      const grown = await this.open(uris);
      return { ...grown, reopened: resumed.reopened, resumed: resumed.resumed };
    }
    const filter = this.filterFor(uris);
    this.deps.resume(this.continuing || this.state.kind === "dropped");
    const next = Object.keys(filter).length === 0 ? undefined : await this.connection.request((client, options) => client.listen(filter, options));
    const previous = this.state;
    this.continuing = false;
    if (previous.kind === "closed") {
      void next?.close().catch(() => undefined);
      throw notConnected();
    }
    if (previous.kind === "dropped") this.deps.clock.clearTimeout(previous.timer);
    const resumed = next !== undefined && this.deps.resumedExactly();
    const refusals = next !== undefined ? this.deps.refusals() : new Map<string, RefusalReason>();
    const honored = new Set(next?.honoredFilter.resourceSubscriptions ?? []);
    const attempt = previous.kind === "dropped" ? previous.attempt + 1 : this.attemptAfter(previous);
    this.state = { kind: "open", subscription: next, since: this.deps.clock.now(), attempt };
    this.uris = uris.filter((uri) => honored.has(uri));
    if (next !== undefined) this.watch(next);
    if (previous.kind === "open") void previous.subscription?.close().catch(() => undefined);
    // A stream that resumed exactly from the cursor was sent what changed meanwhile: no gap.
    return { honored, reopened: previous.kind === "dropped" && !resumed, resumed, refusals };
  }

  private isClosed(): boolean {
    return this.state.kind === "closed";
  }

  private filterFor(uris: readonly string[]): SubscriptionFilter {
    return { ...this.flags, ...(uris.length > 0 && { resourceSubscriptions: [...uris] }) };
  }

  /** The backoff attempt for reopening should `stream` end now: from the start once it was stable. */
  private attemptAfter(stream: OpenStream): number {
    return this.deps.clock.now() - stream.since >= STABLE_STREAM_MS ? 0 : stream.attempt;
  }

  private watch(subscription: McpSubscription): void {
    void subscription.closed.then((how) => {
      const { state } = this;
      if (how === "local" || state.kind !== "open" || state.subscription !== subscription) return;
      this.drop(this.attemptAfter(state));
    });
  }

  /** No stream now: reopen one after the backoff delay of `attempt`. */
  private drop(attempt: number): void {
    const delay = backoffDelay(this.deps.retry, attempt, this.deps.random);
    const timer = this.deps.clock.setTimeout(() => void this.reopen(attempt), delay);
    this.state = { kind: "dropped", attempt, timer };
    this.deps.dropped();
  }

  private async reopen(attempt: number): Promise<void> {
    try {
      await this.queue.run(async () => {
        // An add or remove may have reopened it meanwhile.
        if (this.state.kind === "dropped") await this.replace(this.uris, namedOrAll);
      });
    } catch (error) {
      if (this.state.kind !== "dropped" || this.state.attempt !== attempt) return;
      if (error instanceof ProtocolError) this.deps.streamRefused(error);
      this.drop(attempt + 1);
    }
  }
}

function notConnected(): BrokerClientError {
  return new BrokerClientError("NOT_CONNECTED", "The connection this listen stream belongs to is closed.");
}

/** SUBSCRIPTION_REFUSED, with the server's reason (`data.error`, and the error's own message) when it gave one. */
function refusedError(uri: string, reason?: RefusalReason): BrokerClientError {
  if (reason === undefined) return new BrokerClientError("SUBSCRIPTION_REFUSED", `The server did not honor the subscription to ${uri}.`, { uri });
  return new BrokerClientError("SUBSCRIPTION_REFUSED", `The server did not honor the subscription to ${uri}: ${reason.message}`, { uri, error: reason });
}

function rejectedUri(error: ProtocolError, candidates: readonly string[]): string | undefined {
  const data: unknown = error.data;
  if (typeof data !== "object" || data === null) return undefined;
  const uri = (data as { uri?: unknown }).uri;
  return typeof uri === "string" && candidates.includes(uri) ? uri : undefined;
}

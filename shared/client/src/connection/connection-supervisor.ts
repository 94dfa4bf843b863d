import { backoffDelay, type BackoffPolicy, type Clock, type TimerHandle } from "@mcp-broker/shared";
import { BrokerClientError } from "../errors.js";
import type { Connection } from "./connection.js";

export type ConnectionState = "disconnected" | "connecting" | "connected" | "reconnecting";

export interface ReconnectPolicy extends BackoffPolicy {
  /** Give up after this many failed attempts in a row (then the client is disconnected). */
  maxAttempts: number;
}

export interface SupervisorDeps {
  clock: Clock;
  random: () => number;
  /** Undefined: a dropped connection is not replaced. */
  reconnect: ReconnectPolicy | undefined;
  /** A new, unopened connection whose `lost` is routed to `onLost`. */
  create(onLost: (connection: Connection, error: BrokerClientError) => void): Connection;
  /**
   * Brings an open connection into service (listen stream, subscriptions, lists) before it is
   * reported connected. A rejection fails the attempt.
   */
  establish(connection: Connection, reconnect: boolean): Promise<void>;
  /** Every state change; `attempt` counts failed reconnect attempts so far. */
  stateChanged(change: { state: ConnectionState; error?: unknown; attempt?: number }): void;
}

type Phase =
  | { readonly kind: "disconnected" }
  /** `connection` is being opened and established. */
  | { readonly kind: "connecting"; readonly connection: Connection }
  | { readonly kind: "connected"; readonly connection: Connection }
  /** Waiting for the timer of attempt `attempt` (`connection` undefined), or running it. */
  | { readonly kind: "reconnecting"; readonly attempt: number; readonly timer: TimerHandle | undefined; readonly connection: Connection | undefined };

/**
 * Keeps the client connected: one connection at a time; when it drops, a new one after a capped
 * exponential backoff with jitter, attempt after attempt, until one is established or the policy
 * gives up. `disconnect()` stops everything at once, including a connection being opened or
 * established (it is closed, so a `connect()` under way rejects with CONNECT_ABORTED).
 */
export class ConnectionSupervisor {
  private phase: Phase = { kind: "disconnected" };
  /** Bumped by connect(), disconnect() and giving up: work begun under an older epoch is void. */
  private epoch = 0;

  constructor(private readonly deps: SupervisorDeps) {}

  get state(): ConnectionState {
    return this.phase.kind;
  }

  /**
   * The connection calls go to: the one in service, or the one being established once it is
   * open (listeners of the events fired while it is set up can already use it). Undefined
   * otherwise: before the first connect, during a backoff wait, after disconnecting.
   */
  get usable(): Connection | undefined {
    const { phase } = this;
    if (phase.kind === "connected") return phase.connection;
    if ((phase.kind === "connecting" || phase.kind === "reconnecting") && phase.connection?.alive === true) return phase.connection;
    return undefined;
  }

  /** The close of the last disconnect, while it runs. */
  private closing: Promise<void> | undefined;

  async connect(): Promise<void> {
    if (this.phase.kind !== "disconnected") {
      throw new BrokerClientError("ALREADY_CONNECTED", `connect() called while ${this.phase.kind}; call disconnect() first.`);
    }
    const epoch = ++this.epoch;
    const connection = this.create();
    this.enter({ kind: "connecting", connection });
    try {
      await this.establish(epoch, connection, false);
    } catch (error) {
      if (epoch !== this.epoch) {
        throw new BrokerClientError("CONNECT_ABORTED", "disconnect() was called before connect() finished.", undefined, { cause: error });
      }
      this.enter({ kind: "disconnected" }, error);
      throw error;
    }
  }

  async disconnect(): Promise<void> {
    const phase = this.phase;
    this.epoch++;
    // A disconnect under way: this one is done when that one is (its DELETE sent, say).
    if (phase.kind === "disconnected") return this.closing;
    if (phase.kind === "reconnecting" && phase.timer !== undefined) this.deps.clock.clearTimeout(phase.timer);
    this.enter({ kind: "disconnected" });
    // Also a connection still opening or being established: its requests fail at once.
    const closing = phase.connection?.close({ endSession: true });
    this.closing = closing;
    try {
      await closing;
    } finally {
      if (this.closing === closing) this.closing = undefined;
    }
  }

  private create(): Connection {
    return this.deps.create((lost, error) => this.lost(lost, error));
  }

  /**
   * Opens and establishes `connection` and enters `connected` with it; closes it again if anything
   * fails or the epoch moved on. The last checks and the state change happen in one synchronous
   * step, so a drop cannot slip in between.
   */
  private async establish(epoch: number, connection: Connection, reconnect: boolean): Promise<void> {
    try {
      await connection.open();
      if (epoch !== this.epoch) throw new BrokerClientError("NOT_CONNECTED", "disconnect() was called while the connection was opening.");
      await this.deps.establish(connection, reconnect);
    } catch (error) {
      await connection.close();
      throw error;
    }
    if (epoch !== this.epoch) {
      await connection.close();
      throw new BrokerClientError("NOT_CONNECTED", "disconnect() was called while the connection was being established.");
    }
    // It may have dropped while it was being established.
    if (!connection.alive) throw new BrokerClientError("CONNECTION_LOST", "The connection dropped while it was being established.");
    this.enter({ kind: "connected", connection });
  }

  private lost(connection: Connection, error: BrokerClientError): void {
    if (this.phase.kind !== "connected" || this.phase.connection !== connection) return;
    if (this.deps.reconnect === undefined) {
      this.epoch++;
      this.enter({ kind: "disconnected" }, error);
      return;
    }
    this.schedule(0, error);
  }

  private schedule(attempt: number, error: unknown): void {
    const policy = this.deps.reconnect;
    if (policy === undefined) return;
    const epoch = this.epoch;
    const delay = backoffDelay(policy, attempt, this.deps.random);
    const timer = this.deps.clock.setTimeout(() => void this.attempt(epoch, attempt), delay);
    this.enter({ kind: "reconnecting", attempt, timer, connection: undefined }, error);
  }

  private async attempt(epoch: number, attempt: number): Promise<void> {
    if (epoch !== this.epoch) return;
    const connection = this.create();
    this.phase = { kind: "reconnecting", attempt, timer: undefined, connection };
    try {
      await this.establish(epoch, connection, true);
    } catch (error) {
      if (epoch !== this.epoch) return;
      const failed = attempt + 1;
      if (failed >= (this.deps.reconnect?.maxAttempts ?? 0)) {
        this.epoch++;
        this.enter({ kind: "disconnected" }, error);
        return;
      }
      this.schedule(failed, error);
    }
  }

  private enter(phase: Phase, error?: unknown): void {
    this.phase = phase;
    this.deps.stateChanged({
      state: phase.kind,
      ...(error !== undefined && { error }),
      ...(phase.kind === "reconnecting" && { attempt: phase.attempt }),
    });
  }
}

import type { ProcessUsage } from "../core/process-usage.js";

export type ClientKind = "legacy" | "modern";

/** One client of the run: its era and the bench resources (keys k of bench+bench://r/<k>) it subscribes to. */
export interface ClientSpec {
  index: number;
  kind: ClientKind;
  keys: number[];
}

export interface OpenClientsParams {
  /** The MCP endpoint (the load balancer). */
  url: string;
  clients: ClientSpec[];
  /** Handshakes in flight at once. */
  concurrency: number;
  /** Response header naming the broker that answered (set by the harness's load balancer), recorded with each stream. */
  serverHeader: string;
  /** The emission step of this run: updates of `bench://r/<k>/<step>.<seq>.<µs>` carry their seq. */
  step: number;
}

export interface OpenClientsResult {
  opened: number;
  failed: number;
  errors: string[];
  ms: number;
}

/** Why a client opened a stream: its first, a reconnect of its session or listen, or a new session after its old one was refused (404). */
export type StreamReason = "initial" | "reconnect" | "restart";

/** One stream a client opened, or tried to open (then `openMicros` is 0). Times are µs on the cross-process clock. */
export interface StreamRecord {
  /** 1-based, in the order of the client's attempts; events name the stream they came on. */
  no: number;
  reason: StreamReason;
  /** Failed attempts before this one, since the last stream that opened. */
  attempt: number;
  requestMicros: number;
  openMicros: number;
  /** HTTP status (0: no response: connection refused or reset, or timed out). */
  status: number;
  error?: string;
  /** Which broker answered (the load balancer's header), when it said. */
  server?: string;
  /** The Last-Event-ID (legacy) or event id of the cursor (modern) it resumed from; undefined: none sent. */
  resumeFrom?: string;
  /** Modern: the acknowledgement's `io.mcp-broker/resumed`. */
  resumed?: string;
  /** Modern: how many of its subscriptions the acknowledgement's filter honored (fewer: the client leaves it and listens again later). */
  honored?: number;
  endMicros: number;
  endReason?: string;
}

/** An HTTP 404 a client got for its session. */
export interface SessionRefusal {
  atMicros: number;
  sessionId: string;
  what: string;
  server?: string;
}

/**
 * Everything one client saw. `events[i]` is for `keys[i]`: flat runs of EVENT_FIELDS numbers per
 * `notifications/resources/updated` received, in arrival order.
 */
export interface ClientRecord {
  index: number;
  kind: ClientKind;
  keys: number[];
  /** Legacy: its session ids, the first and one more per restart. */
  sessionIds: string[];
  /** When each of them was initialized, µs. */
  initializedAt: number[];
  streams: StreamRecord[];
  events: number[][];
  /** `updated` for a resource this client never subscribed to (must be 0). */
  foreign: number;
  /** `updated` whose URI or id/cursor could not be read. */
  unreadable: number;
  /** Other notifications received, by method. */
  other: Record<string, number>;
  refusals: SessionRefusal[];
  /** Requests sent again because the broker answered that the session moved meanwhile (`data.moved`). */
  movedRetries: number;
  /** Its POSTs: `<s since epoch> <session> <method> [uri] → <status> [moved|error] via <broker>`. */
  trace: string[];
  /** When the client failed to set up (its record is then partial). */
  setupError?: string;
}

/** Fields of one received `updated`, in order, in `ClientRecord.events`. */
export const EVENT_FIELDS = 5;
/** Offsets into one event's fields. */
export const EV = {
  /** Arrival, µs on the cross-process clock. */
  at: 0,
  /** The cluster position of its event id (legacy `id:`, modern cursor); -1 when none could be read. */
  position: 1,
  /** The broker-local part of the id (`<position>.<n>`), 0 for a cluster event. */
  local: 2,
  /** The update's seq when the URI is the emitted sub-resource of this run's step; -1 for the resource itself (a resumption or re-announcement). */
  seq: 3,
  stream: 4,
} as const;

export interface GeneratorStatus {
  clients: number;
  /** Clients whose stream is open now. */
  open: number;
  /** Clients waiting to reconnect or reconnecting. */
  reconnecting: number;
  updates: number;
  refusals: number;
  restarts: number;
}

/** The API a chaos load generator serves over IPC. */
export type ChaosGeneratorApi = {
  open(params: OpenClientsParams): Promise<OpenClientsResult>;
  status(params: Record<string, never>): GeneratorStatus;
  /** Clients from..from+count-1 (in the order they were opened), as recorded so far. */
  dump(params: { from: number; count: number }): ClientRecord[];
  /** Stops reconnecting and ends every session (legacy: DELETE), then closes the streams. */
  closeAll(params: Record<string, never>): Promise<{ deleted: number; failed: number }>;
  usage(params: { gc: boolean }): ProcessUsage | Promise<ProcessUsage>;
};

/** What the cluster keeps of one legacy session (its subscriptions are in the registry). */
export interface SessionRecord {
  sessionId: string;
  principal: string;
  /** The protocol revision `initialize` negotiated. */
  protocolVersion: string;
  clientInfo?: unknown;
  capabilities?: unknown;
  /** The level the client asked for with `logging/setLevel`. */
  logLevel?: string;
  /** The member that holds it; "" when none does (its member died or handed it off). */
  owner: string;
  /** Grows by one with every change of holder: the newest holder has the largest. */
  epoch: number;
  /** When a request last came for it (epoch ms). */
  lastSeen: number;
}

/** Notices a session no member holds keeps for its next holder (see `SessionStore.remind`). */
export const MAX_NOTICES = 16;

export type NewSession = Pick<SessionRecord, "sessionId" | "principal" | "protocolVersion" | "clientInfo" | "capabilities">;

/** A session by its key. */
export interface SessionKey {
  principal: string;
  sessionId: string;
}

/**
 * Legacy sessions as the cluster knows them, so that any member can take one over. A record is
 * bound to its principal: looked up under another principal it does not exist. While a member
 * holds it, it lives as long as that member keeps it; one no member holds (its member died, or
 * handed it off while stopping) expires `idleMs` after it was let go, unless a member adopts it
 * first. Whoever lets a session go keeps its subscriptions held in the registry; they are released
 * when the session ends or its record expires (`expired`).
 */
export interface SessionStore {
  /** Records a session held by `owner` (a new one: epoch 1; one written again after Redis lost it: its epoch). */
  create(session: NewSession, owner: string, now: number, epoch?: number): Promise<void>;
  get(key: SessionKey): Promise<SessionRecord | undefined>;
  /**
   * `owner` takes the session over: the epoch grows by one, the previous holder (if any, and not
   * `owner`) is returned to be told. Undefined when no such session exists (for this principal).
   */
  adopt(key: SessionKey, owner: string, now: number): Promise<{ record: SessionRecord; previous: string | undefined; notices: string[] } | undefined>;
  /**
   * Keeps `notice` for whoever adopts the session next (see `adopt`), when no member holds it now:
   * what happened to it meanwhile (subscriptions a limits job removed) is then told, not lost. False
   * when a member holds it (it heard of it over the bus) or there is no such session. At most
   * `MAX_NOTICES` are kept, the oldest dropped first.
   */
  remind(key: SessionKey, notice: string): Promise<boolean>;
  /** A request came for it. */
  touch(key: SessionKey, now: number): Promise<void>;
  setLogLevel(key: SessionKey, level: string): Promise<void>;
  /** The session ended: its record goes (its subscriptions are released by whoever ended it). */
  delete(key: SessionKey): Promise<void>;
  /**
   * `owner` lets the session go without ending it (it stops): unless another member holds it by
   * now (a newer epoch than `epoch`), it expires `idleMs` from now unless adopted.
   */
  letGo(key: SessionKey, owner: string, epoch: number, idleMs: number): Promise<void>;
  /**
   * The sessions `owner` held, let go because it died: as `letGo`, for every one of them, while the
   * cluster's claim on `owner` stands (see `SubscriptionRegistry.claimInstance`); returns them.
   */
  orphan(owner: string, idleMs: number): Promise<SessionKey[]>;
  /**
   * Sessions let go whose records expired (nobody adopted them): their subscriptions are to be
   * released. Each comes back every `retryMs` until `released` says its holdings are gone, so a
   * release cut short (a Redis error, the member dying) is done again, not forgotten.
   */
  expired(now: number, retryMs: number): Promise<SessionKey[]>;
  /** What an expired session held was released (see `expired`). */
  released(key: SessionKey): Promise<void>;
  close(): Promise<void>;
}

/** One client subscription: who holds it and which backend resource it names. */
export interface SubscriptionRef {
  principal: string;
  /** Session id (legacy) or listen-stream id (modern); unique per principal. */
  sessionId: string;
  backendId: string;
  /** The subscribed URI in the backend's own form. */
  uri: string;
  /**
   * The holding (`SessionRecord.epoch`) of the legacy session the caller acts for: a fence. An add
   * for a session whose record names another holding (another member adopted it meanwhile) or none
   * (it ended) is refused with `moved`; a remove for a session another member holds by now leaves
   * its subscription alone. Without it (listen streams, the cluster's own jobs) nothing is checked;
   * engines whose sessions cannot move (memory) ignore it.
   */
  epoch?: number;
}

export interface SubscriptionLimits {
  perSession: number;
  perPrincipal: number;
  total: number;
}

export type AddOutcome =
  /**
   * `watched`: not the first, and the cluster's watcher has the resource watched upstream already
   * (it marked it so, and nobody released it since: see `markWatched`): the subscribe need not
   * ask the watcher. Only engines whose watcher may be another member set it.
   */
  | { status: "added"; first: boolean; watched?: boolean }
  | { status: "exists" }
  /** The session is held at another epoch than the ref's, or ended (see `SubscriptionRef.epoch`). */
  | { status: "moved" }
  | { status: "limit"; limit: "session" | "principal" | "global"; max: number };

export interface RemoveOutcome {
  removed: boolean;
  /** The cluster-wide count for (backend, uri) dropped to zero. */
  last: boolean;
  /** Left alone: the session is held at another epoch than the ref's (see `SubscriptionRef.epoch`). */
  moved?: boolean;
}

/** What a heartbeat learns. */
export interface Heartbeat {
  /**
   * False when the cluster had claimed this process as dead (`claimInstance`: its subscriptions may
   * have been reaped), so its sessions leave it. A heartbeat that merely expired (a stall, Redis
   * away or restarted) is not that: nothing was released.
   */
  alive: boolean;
  /**
   * Redis may have lost writes of this process since its previous heartbeat: it restarted empty,
   * or from a snapshot older than that heartbeat, or another server answers (Redis restarted, or a
   * replica took over: its snapshot or replication stream may miss writes made after the
   * heartbeat). What the process holds must be written back.
   */
  lost: boolean;
}

/**
 * Who is subscribed to what, cluster-wide, with limits. `add` and `remove` are atomic: limits hold
 * exactly under concurrent calls from any number of processes, and `first`/`last` are reported to
 * exactly one caller per transition.
 */
export interface SubscriptionRegistry {
  add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome>;
  /**
   * `add` for each of `refs`, all of one session (principal, session id and epoch), in one atomic
   * step, in order: as many adds one after another would answer (a listen's URIs, one Redis
   * script instead of one per URI). An empty list answers [].
   */
  addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]>;
  remove(ref: SubscriptionRef): Promise<RemoveOutcome>;
  /** `remove` for each of `refs`, all of one session, in one atomic step (what an ended session held: one Redis script). */
  removeMany(refs: readonly SubscriptionRef[]): Promise<RemoveOutcome[]>;
  /** Everything one session holds. */
  ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]>;
  /** URIs of a backend with at least one subscriber (the desired upstream set). */
  wanted(backendId: string): Promise<string[]>;
  count(backendId: string, uri: string): Promise<number>;
  /**
   * Whether nobody wants (backend, uri) any more (its watcher may unwatch it upstream). When so,
   * in one step with that check, the mark that it is watched goes (see `AddOutcome.watched`):
   * from then on the next subscribe is the first again, and asks the watcher.
   */
  unwatch(backendId: string, uri: string): Promise<boolean>;
  /**
   * The watcher has (backend, uri) watched upstream (it just watched it, or answered another
   * member's ask for it): later subscribes need not ask (see `AddOutcome.watched`). The first
   * subscribe after it removes the mark again: the watcher, asked, marks it again. Returns the
   * subscriber count read in the same step (a watch just made checks that somebody still wants it).
   */
  markWatched(backendId: string, uri: string): Promise<number>;
  /** This process is alive for `ttlMs` more (see `Heartbeat` for what it learns). */
  heartbeat(ttlMs: number): Promise<Heartbeat>;
  /**
   * Processes that heartbeat once and whose heartbeat has been missing for at least `graceMs` (not
   * reaped yet). The grace spares processes that only need their next heartbeat: after Redis
   * restarted from a snapshot, say, every heartbeat in it has expired.
   */
  deadInstances(graceMs: number): Promise<string[]>;
  /**
   * Claims a process found dead before reaping it: from then on its next heartbeat tells it it was
   * presumed dead. False when it has a heartbeat again (it is not to be reaped).
   */
  claimInstance(instanceId: string): Promise<boolean>;
  /**
   * Removes, while the cluster's claim on it stands (`claimInstance`; once the process read it, what
   * it holds is its own again), every subscription held by the sessions of a dead process (those still indexed under
   * it: a session another process adopted, or one let go, is not), forgets the process, and returns
   * the (backend, uri) whose cluster-wide count this dropped to zero (each to exactly one caller).
   */
  reapInstance(instanceId: string): Promise<{ backendId: string; uri: string }[]>;
  /**
   * Recounts the per-principal and global counts from the sessions' own sets and repairs any that
   * drifted; each principal's count (and then the total) is recounted and set in one atomic step,
   * so subscribes and unsubscribes running meanwhile are neither lost nor counted twice.
   */
  audit(): Promise<AuditReport>;
  /**
   * The holdings beyond `limits` (after the limits were lowered), newest first within each scope:
   * per session, then per principal, then cluster-wide. Removing them (with `remove`) brings the
   * holdings within the limits; subscribes made meanwhile are caught by the next look.
   */
  beyond(limits: SubscriptionLimits): Promise<Beyond[]>;
  close(): Promise<void>;
}

/** What the audit found: the repairs it made, and the largest holdings (to tell whether any is beyond the limits). */
export interface AuditReport {
  repairs: CountRepair[];
  total: number;
  largestPrincipal: number;
  largestSession: number;
}

/** One count the audit found wrong, and what it set it to. */
export type CountRepair = { scope: "principal"; principal: string; was: number; now: number } | { scope: "total"; was: number; now: number };

/** A subscription beyond a limit. */
export interface Beyond {
  ref: SubscriptionRef;
  limit: "session" | "principal" | "global";
  max: number;
}

import { beyondLimits, type Holding } from "../limits.js";
import type { AddOutcome, AuditReport, Beyond, CountRepair, Heartbeat, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";

const SEP = "\u0000";

/** In-process registry; every operation runs synchronously, so limits hold exactly. */
export class MemoryRegistry implements SubscriptionRegistry {
  /** session key → resource key → when it was added (a sequence: larger is newer) */
  private readonly sessions = new Map<string, Map<string, number>>();
  private added = 0;
  private readonly perPrincipal = new Map<string, number>();
  /** resource key → subscriber count */
  private readonly refcounts = new Map<string, number>();
  private total = 0;

  async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
    return this.addOne(ref, limits, ref.principal + SEP + ref.sessionId);
  }

  async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
    return eachRef(refs, (ref, sessionKey) => this.addOne(ref, limits, sessionKey));
  }

  private addOne(ref: SubscriptionRef, limits: SubscriptionLimits, sessionKey: string): AddOutcome {
    const resourceKey = ref.backendId + SEP + ref.uri;
    const held = this.sessions.get(sessionKey);
    if (held?.has(resourceKey)) return { status: "exists" };
    if ((held?.size ?? 0) >= limits.perSession) return { status: "limit", limit: "session", max: limits.perSession };
    const principalCount = this.perPrincipal.get(ref.principal) ?? 0;
    if (principalCount >= limits.perPrincipal) return { status: "limit", limit: "principal", max: limits.perPrincipal };
    if (this.total >= limits.total) return { status: "limit", limit: "global", max: limits.total };
    if (held === undefined) this.sessions.set(sessionKey, new Map([[resourceKey, ++this.added]]));
    else held.set(resourceKey, ++this.added);
    this.perPrincipal.set(ref.principal, principalCount + 1);
    this.total++;
    const count = (this.refcounts.get(resourceKey) ?? 0) + 1;
    this.refcounts.set(resourceKey, count);
    return { status: "added", first: count === 1 };
  }

  async remove(ref: SubscriptionRef): Promise<RemoveOutcome> {
    return this.removeOne(ref, ref.principal + SEP + ref.sessionId);
  }

  async removeMany(refs: readonly SubscriptionRef[]): Promise<RemoveOutcome[]> {
    return eachRef(refs, (ref, sessionKey) => this.removeOne(ref, sessionKey));
  }

  private removeOne(ref: SubscriptionRef, sessionKey: string): RemoveOutcome {
    const resourceKey = ref.backendId + SEP + ref.uri;
    const held = this.sessions.get(sessionKey);
    if (held?.delete(resourceKey) !== true) return { removed: false, last: false };
    if (held.size === 0) this.sessions.delete(sessionKey);
    const principalCount = (this.perPrincipal.get(ref.principal) ?? 1) - 1;
    if (principalCount === 0) this.perPrincipal.delete(ref.principal);
    else this.perPrincipal.set(ref.principal, principalCount);
    this.total--;
    const count = (this.refcounts.get(resourceKey) ?? 1) - 1;
    if (count === 0) this.refcounts.delete(resourceKey);
    else this.refcounts.set(resourceKey, count);
    return { removed: true, last: count === 0 };
  }

  /** One process: its watcher is local, and nothing is marked (see `AddOutcome.watched`). */
  async unwatch(backendId: string, uri: string): Promise<boolean> {
    return !this.refcounts.has(backendId + SEP + uri);
  }

  /** Nothing is marked here; the count is the one `count` reads. */
  async markWatched(backendId: string, uri: string): Promise<number> {
    return this.count(backendId, uri);
  }

  async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
    return [...(this.sessions.get(principal + SEP + sessionId)?.keys() ?? [])].map((key) => refOf(principal, sessionId, key));
  }

  /** Counts here change only with the holdings (nothing can drift), but the recount is the same. */
  async audit(): Promise<AuditReport> {
    const actual = new Map<string, number>();
    let largestSession = 0;
    for (const [sessionKey, held] of this.sessions) {
      const principal = sessionKey.slice(0, sessionKey.indexOf(SEP));
      actual.set(principal, (actual.get(principal) ?? 0) + held.size);
      largestSession = Math.max(largestSession, held.size);
    }
    const repairs: CountRepair[] = [];
    for (const principal of new Set([...actual.keys(), ...this.perPrincipal.keys()])) {
      const was = this.perPrincipal.get(principal) ?? 0;
      const now = actual.get(principal) ?? 0;
      if (was === now) continue;
      repairs.push({ scope: "principal", principal, was, now });
      if (now === 0) this.perPrincipal.delete(principal);
      else this.perPrincipal.set(principal, now);
    }
    const total = [...actual.values()].reduce((sum, n) => sum + n, 0);
    if (this.total !== total) repairs.push({ scope: "total", was: this.total, now: total });
    this.total = total;
    return { repairs, total, largestPrincipal: Math.max(0, ...actual.values()), largestSession };
  }

  async beyond(limits: SubscriptionLimits): Promise<Beyond[]> {
    const sessions: Holding[][] = [];
    for (const [sessionKey, held] of this.sessions) {
      const at = sessionKey.indexOf(SEP);
      const principal = sessionKey.slice(0, at);
      const sessionId = sessionKey.slice(at + 1);
      sessions.push([...held].map(([key, since]) => ({ ref: refOf(principal, sessionId, key), since })));
    }
    return beyondLimits(sessions, limits);
  }

  async wanted(backendId: string): Promise<string[]> {
    const prefix = backendId + SEP;
    return [...this.refcounts.keys()].filter((k) => k.startsWith(prefix)).map((k) => k.slice(prefix.length));
  }

  async count(backendId: string, uri: string): Promise<number> {
    return this.refcounts.get(backendId + SEP + uri) ?? 0;
  }

  /** One process: it is never presumed dead, and there is nobody else to reap. */
  async heartbeat(): Promise<Heartbeat> {
    return { alive: true, lost: false };
  }

  async deadInstances(): Promise<string[]> {
    return [];
  }

  async claimInstance(): Promise<boolean> {
    return false;
  }

  async reapInstance(): Promise<{ backendId: string; uri: string }[]> {
    return [];
  }

  async close(): Promise<void> {}
}

/**
 * `one` for each ref in a loop, with its session's key (made again only when the session changes).
 * A listen of 100 URIs is one call: an await per ref, with the session's key built again for
 * each, made the registry's adds and releases 17 % of the broker's CPU in the subscribe-cost
 * bench's listen ×100 phase (step profile; 10 % without), 118 → 65 µs per listen of 100 URIs
 * held already (add and release, micro-benchmark).
 */
function eachRef<T>(refs: readonly SubscriptionRef[], one: (ref: SubscriptionRef, sessionKey: string) => T): T[] {
  const out: T[] = [];
  let previous: SubscriptionRef | undefined;
  let sessionKey = "";
  for (const ref of refs) {
    if (previous?.principal !== ref.principal || previous.sessionId !== ref.sessionId) sessionKey = ref.principal + SEP + ref.sessionId;
    previous = ref;
    out.push(one(ref, sessionKey));
  }
  return out;
}

function refOf(principal: string, sessionId: string, resourceKey: string): SubscriptionRef {
  const at = resourceKey.indexOf(SEP);
  return { principal, sessionId, backendId: resourceKey.slice(0, at), uri: resourceKey.slice(at + 1) };
}

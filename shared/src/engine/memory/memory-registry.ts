import { beyondLimits, type Holding } from "../limits.js";
import type { AddOutcome, AuditReport, Beyond, CountRepair, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";

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
    const sessionKey = ref.principal + SEP + ref.sessionId;
    const resourceKey = ref.backendId + SEP + ref.uri;
    const held = this.sessions.get(sessionKey);
    if (held?.has(resourceKey)) return { status: "exists" };
    if ((held?.size ?? 0) >= limits.perSession) return { status: "limit", limit: "session", max: limits.perSession };
    if ((this.perPrincipal.get(ref.principal) ?? 0) >= limits.perPrincipal) return { status: "limit", limit: "principal", max: limits.perPrincipal };
    if (this.total >= limits.total) return { status: "limit", limit: "global", max: limits.total };
    const set = held ?? new Map<string, number>();
    set.set(resourceKey, ++this.added);
    this.sessions.set(sessionKey, set);
    this.perPrincipal.set(ref.principal, (this.perPrincipal.get(ref.principal) ?? 0) + 1);
    this.total++;
    const count = (this.refcounts.get(resourceKey) ?? 0) + 1;
    this.refcounts.set(resourceKey, count);
    return { status: "added", first: count === 1 };
  }

  async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
    const outcomes: AddOutcome[] = [];
    for (const ref of refs) outcomes.push(await this.add(ref, limits));
    return outcomes;
  }

  async remove(ref: SubscriptionRef): Promise<RemoveOutcome> {
    const sessionKey = ref.principal + SEP + ref.sessionId;
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

  async removeMany(refs: readonly SubscriptionRef[]): Promise<RemoveOutcome[]> {
    const outcomes: RemoveOutcome[] = [];
    for (const ref of refs) outcomes.push(await this.remove(ref));
    return outcomes;
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
  async heartbeat(): Promise<boolean> {
    return true;
  }

  async deadInstances(): Promise<string[]> {
    return [];
  }

  async reapInstance(): Promise<{ backendId: string; uri: string }[]> {
    return [];
  }

  async close(): Promise<void> {}
}

function refOf(principal: string, sessionId: string, resourceKey: string): SubscriptionRef {
  const at = resourceKey.indexOf(SEP);
  return { principal, sessionId, backendId: resourceKey.slice(0, at), uri: resourceKey.slice(at + 1) };
}

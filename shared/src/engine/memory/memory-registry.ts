import type { AddOutcome, RemoveOutcome, SubscriptionLimits, SubscriptionRef, SubscriptionRegistry } from "../registry.js";

const SEP = "\u0000";

/** In-process registry; every operation runs synchronously, so limits hold exactly. */
export class MemoryRegistry implements SubscriptionRegistry {
  /** session key → resource keys */
  private readonly sessions = new Map<string, Set<string>>();
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
    const set = held ?? new Set<string>();
    set.add(resourceKey);
    this.sessions.set(sessionKey, set);
    this.perPrincipal.set(ref.principal, (this.perPrincipal.get(ref.principal) ?? 0) + 1);
    this.total++;
    const count = (this.refcounts.get(resourceKey) ?? 0) + 1;
    this.refcounts.set(resourceKey, count);
    return { status: "added", first: count === 1 };
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

  async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
    return [...(this.sessions.get(principal + SEP + sessionId) ?? [])].map((key) => {
      const [backendId = "", uri = ""] = key.split(SEP);
      return { principal, sessionId, backendId, uri };
    });
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

  async reapDead(): Promise<{ backendId: string; uri: string }[]> {
    return [];
  }

  async close(): Promise<void> {}
}

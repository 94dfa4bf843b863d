import type { Beyond, SubscriptionLimits, SubscriptionRef } from "./registry.js";

/** One subscription with its place in time (larger: newer). */
export interface Holding {
  ref: SubscriptionRef;
  since: number;
}

/**
 * The newest holdings beyond `limits`: per session first, then (of what is left) per principal,
 * then cluster-wide. Shared by the registries: they only gather the holdings, in whichever way suits them.
 * `sessions` holds each session's holdings; `total` counts all of them.
 */
export function beyondLimits(sessions: Iterable<readonly Holding[]>, limits: SubscriptionLimits): Beyond[] {
  const out: Beyond[] = [];
  const kept = new Map<string, Holding[]>();
  for (const holdings of sessions) {
    const ordered = [...holdings].sort((a, b) => a.since - b.since);
    for (const extra of ordered.slice(limits.perSession).reverse()) out.push({ ref: extra.ref, limit: "session", max: limits.perSession });
    for (const holding of ordered.slice(0, limits.perSession)) {
      const list = kept.get(holding.ref.principal) ?? [];
      list.push(holding);
      kept.set(holding.ref.principal, list);
    }
  }
  const survivors: Holding[] = [];
  for (const holdings of kept.values()) {
    holdings.sort((a, b) => a.since - b.since);
    for (const extra of holdings.slice(limits.perPrincipal).reverse()) out.push({ ref: extra.ref, limit: "principal", max: limits.perPrincipal });
    survivors.push(...holdings.slice(0, limits.perPrincipal));
  }
  survivors.sort((a, b) => a.since - b.since);
  for (const extra of survivors.slice(limits.total).reverse()) out.push({ ref: extra.ref, limit: "global", max: limits.total });
  return out;
}

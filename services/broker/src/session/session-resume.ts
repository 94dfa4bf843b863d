import type { ListName, UpdateLog } from "@mcp-broker/shared";
import { LIST_NAMES } from "../catalog/catalog-service.js";
import type { SubscriptionTarget } from "../fanout/interest-table.js";
import type { SinceReport } from "./legacy-session.js";

/**
 * What the cluster can tell a resuming client: which of its subscriptions were updated after the
 * position it last saw (the update log's stamps, one read per backend), which lists changed after
 * it (the position of each list's newest change on this broker: a stored version applied, or a
 * backend that connected or dropped, see `CatalogService.changedPosition`), and which subscriptions
 * nobody can tell about (watched only since it was handed out, or later). A position the cluster
 * never handed out (forged, or from before Redis lost its data), or one that may have been handed
 * out twice (`UpdateLog.lostUpTo`), cannot be told about, nor can anything while a list change
 * could not be placed in the cluster's order: it rejects, and the session announces everything.
 */
export class SessionResume {
  constructor(
    private readonly deps: {
      updates: UpdateLog;
      /** The cluster position of the newest change to `list` here; undefined: not known (see `CatalogService.changedPosition`). */
      listPosition(list: ListName): number | undefined;
      /** A position reserved after the call, once every event before it has reached this member (see `BusBarrier`). */
      caughtUp(): Promise<number>;
    },
  ) {}

  /** The newest position the cluster has handed out. */
  current(): Promise<number> {
    return this.deps.updates.current();
  }

  /**
   * A position reserved in the cluster's order, once every event handed out before it has reached
   * this member: an event id at it comes after everything this member delivers before it, and
   * before everything it delivers later, and a cursor naming it resumes after every upstream
   * watch begun so far. Rejects when Redis or the bus cannot say (the caller makes do with its clock).
   */
  caughtUp(): Promise<number> {
    return this.deps.caughtUp();
  }

  async since(targets: readonly SubscriptionTarget[], position: number): Promise<SinceReport> {
    const byBackend = new Map<string, SubscriptionTarget[]>();
    for (const target of targets) {
      const list = byBackend.get(target.backendId) ?? [];
      list.push(target);
      byBackend.set(target.backendId, list);
    }
    // One round trip: the counter and every backend's stamps are read at once.
    const backends = [...byBackend];
    const [handedOut, lost, stampsByBackend] = await Promise.all([
      this.deps.updates.current(),
      this.deps.updates.lostUpTo(),
      Promise.all(backends.map(([backendId, held]) => this.deps.updates.stamps(backendId, held.map((target) => target.uri)))),
    ]);
    if (position > handedOut) throw new Error(`position ${position} was never handed out`);
    // Handed out before Redis lost the counter (or twice since): what came after it cannot be told.
    if (position <= lost) throw new Error(`position ${position} is from before Redis lost the cluster's positions`);
    const report: SinceReport = { updated: [], unknown: [], lists: [] };
    backends.forEach(([, held], b) => {
      const stamps = stampsByBackend[b] ?? [];
      held.forEach((target, i) => {
        const stamp = stamps[i];
        // A watch that began when the position was already `position` (or later) missed whatever changed between.
        if (stamp === undefined || stamp.since === undefined || stamp.since >= position) report.unknown.push(target);
        else if (stamp.updated > position) report.updated.push({ target, position: stamp.updated });
      });
    });
    for (const list of LIST_NAMES) {
      const changed = this.deps.listPosition(list);
      if (changed === undefined) throw new Error(`the ${list} list changed where the cluster's order cannot place it`);
      if (changed > position) report.lists.push({ list, position: changed });
    }
    return report;
  }
}

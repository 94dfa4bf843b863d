import { sleep } from "../core/clock.js";
import type { ClusterDeployment, ClusterOptions } from "../engines/redis-engine.js";
import type { ListWatchCounts, ListWatchReport } from "../load/generator-api.js";
import { range } from "../report/format.js";
import type { BenchContext } from "./bench-context.js";
import { LoadFleet, mergeListCounts } from "./load-fleet.js";

/** The list watch of a cluster's sessions: both eras, and per broker. */
export interface ClusterListReport {
  all: ListWatchCounts;
  legacy: ListWatchReport;
  modern: ListWatchReport;
  /** Both eras merged, per broker (in the order of the cluster's URLs: broker 1 first). */
  perBroker: ListWatchCounts[];
}

/** list_changed per session over a set of sessions: the largest and smallest count, and the total. */
export interface NotificationSpread {
  max: number;
  min: number;
  total: number;
}

/**
 * A cluster (RedisEngine.deployCluster) with `sessionsPerEra` legacy sessions and as many modern
 * listen streams (toolsListChanged), each era spread round-robin over the brokers, every client
 * re-listing tools on each list_changed it gets (scenarios 7 and 8).
 */
export class ClusterSessions {
  private constructor(
    readonly cluster: ClusterDeployment,
    private readonly legacy: LoadFleet,
    private readonly modern: LoadFleet,
  ) {}

  static async start(ctx: BenchContext, label: string, options: ClusterOptions & { sessionsPerEra: number }): Promise<ClusterSessions> {
    const started = Date.now();
    const cluster = await ctx.redis.deployCluster(label, options);
    const deployedMs = Date.now() - started;
    const legacy = LoadFleet.start(ctx.group, `${label}-legacy`, ctx.plan.generators);
    const modern = LoadFleet.start(ctx.group, `${label}-modern`, ctx.plan.generators);
    const sessions = new ClusterSessions(cluster, legacy, modern);
    try {
      const none = range(options.sessionsPerEra).map(() => "");
      await legacy.open("legacy", cluster.urls, none);
      await modern.open("modern", cluster.urls, none, { toolsListChanged: true });
      ctx.log(`  cluster up in ${deployedMs} ms, ${2 * options.sessionsPerEra} sessions open ${Date.now() - started - deployedMs} ms later`);
      // Let the handshakes' after-effects settle before anything is counted.
      await sleep(500);
      return sessions;
    } catch (error) {
      await sessions.stop();
      throw error;
    }
  }

  /** From now on every session counts its list_changed and re-lists on each. */
  async watch(): Promise<void> {
    await Promise.all([this.legacy.watchLists(), this.modern.watchLists()]);
  }

  async report(marker: string): Promise<ClusterListReport> {
    const [legacy, modern] = await Promise.all([this.legacy.listReport(marker), this.modern.listReport(marker)]);
    const perBroker = this.cluster.urls.map((url) => mergeListCounts([legacy, modern].flatMap((r) => r.byUrl.filter(([u]) => u === url).map(([, counts]) => counts))));
    return { all: mergeListCounts([legacy, modern]), legacy, modern, perBroker };
  }

  /** Polls until every session holds `marker` or `timeoutMs` passed; returns the last report. */
  async waitHolding(marker: string, timeoutMs: number): Promise<ClusterListReport> {
    const deadline = Date.now() + timeoutMs;
    let report = await this.report(marker);
    while (report.all.holding < report.all.sessions && Date.now() < deadline) {
      await sleep(50);
      report = await this.report(marker);
    }
    return report;
  }

  async stop(): Promise<void> {
    await Promise.all([this.legacy.stop(), this.modern.stop()]);
    await this.cluster.stop();
  }
}

export function notificationSpread(counts: ListWatchCounts): NotificationSpread {
  const present = counts.notificationCounts.filter(([, sessions]) => sessions > 0).map(([count]) => count);
  return {
    max: Math.max(0, ...present),
    min: present.length === 0 ? 0 : Math.min(...present),
    total: counts.notificationCounts.reduce((n, [count, sessions]) => n + count * sessions, 0),
  };
}

/** "1: 400" style: list_changed per session, as count: sessions. */
export function describeCounts(counts: ListWatchCounts): string {
  return counts.notificationCounts.map(([count, sessions]) => `${count}: ${sessions}`).join(", ");
}

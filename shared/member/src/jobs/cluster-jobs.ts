import { z } from "zod";

const limitsSchema = z.object({ perSession: z.number().int().positive(), perPrincipal: z.number().int().positive(), total: z.number().int().positive() });

/**
 * The cluster's jobs, one queue for all (one BullMQ worker per member). A job's key deduplicates
 * it: a burst of schedules of one key gives one run, and runs of one key never overlap.
 */
export const clusterJobSchema = z.discriminatedUnion("type", [
  /** Re-list one client-visible list of a backend into the cluster catalog. */
  z.object({ type: z.literal("reload"), backendId: z.string(), list: z.enum(["tools", "prompts", "resources"]) }),
  /** Release what the sessions of dead members held. */
  z.object({ type: z.literal("reap") }),
  /** Recount the subscription counts from the sessions' sets and repair any drift; holdings beyond `limits` get a limits job. */
  z.object({ type: z.literal("audit"), limits: limitsSchema }),
  /** Bring the holdings within these (lowered) limits. */
  z.object({ type: z.literal("limits"), limits: limitsSchema }),
]);

export type ClusterJob = z.infer<typeof clusterJobSchema>;

/** The key of a job: one per (backend, list) for reloads, one each for the cluster-wide jobs. */
export function jobKey(job: ClusterJob): string {
  return job.type === "reload" ? `reload:${job.backendId}:${job.list}` : job.type;
}

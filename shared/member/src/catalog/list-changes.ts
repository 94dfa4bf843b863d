import type { BackendConfig, JobQueue } from "@mcp-broker/shared";
import type { ServerCapabilities } from "@modelcontextprotocol/client";
import type { Logger } from "../logger.js";
import { jobKey, type ClusterJob } from "../jobs/cluster-jobs.js";
import { LIST_KINDS, type ListKind } from "./list-reloader.js";

/** A reload that could not be scheduled is tried again after this long, doubling up to the max. */
const SCHEDULE_RETRY_MS = 250;
const SCHEDULE_RETRY_MAX_MS = 5_000;

/** How often a watcher sets its backend's periodic reloads again. */
const RELISTS_AGAIN_MS = 60_000;

/**
 * Where a backend's list changes become reload jobs. Only the backend's watcher (the member holding
 * its lease) takes its `list_changed` in: every member hears it over its own connection, and one
 * reload per change is enough for the cluster. The watcher also reloads everything when it starts
 * watching (the backend may have changed while nobody watched, or restarted), and keeps one
 * repeated reload per list the backend does not announce (`relistIntervalMs`) for the cluster.
 */
export class ListChanges {
  constructor(
    private readonly deps: {
      jobs: JobQueue<ClusterJob>;
      backends: readonly BackendConfig[];
      debounceMs: number;
      relistIntervalMs: number;
      /** Whether this member watches the backend now. */
      watching: (backendId: string) => boolean;
      logger: Logger;
      /** Clock ms (telling a notification coalesced into a pending reload from one that starts a reload). */
      now: () => number;
    },
  ) {}

  /** When each backend's periodic reloads were last set (clock ms). */
  private readonly relisted = new Map<string, number>();

  /** When the reload each (backend, list) notification scheduled is due (clock ms), by `backendId NUL list`. */
  private readonly due = new Map<string, number>();

  /**
   * The backend said `list_changed` on this member's connection (`announced`; `undeclared` when its
   * capabilities do not declare `listChanged` for that list: reloaded anyway), or its notification
   * stream was down for a while (`gap`: what it said meanwhile is lost).
   */
  listChanged(backendId: string, list: ListKind, how: "announced" | "undeclared" | "gap" = "announced"): void {
    if (!this.deps.watching(backendId)) {
      this.deps.logger.debug({ backend: backendId, list }, "list_changed left to the backend's watcher");
      return;
    }
    if (how === "undeclared") this.deps.logger.warn({ backend: backendId, list }, "list_changed from a backend that did not declare listChanged for this list; reloading it anyway");
    const key = `${backendId}\u0000${list}`;
    const now = this.deps.now();
    if ((this.due.get(key) ?? -Infinity) > now) {
      this.deps.logger.debug({ backend: backendId, list }, "list_changed coalesced into the pending reload");
    } else {
      this.deps.logger.info({ backend: backendId, list, debounceMs: this.deps.debounceMs }, how === "gap" ? "the backend's notification stream was down: reloading the list" : "list_changed: reloading the list");
    }
    this.due.set(key, now + this.deps.debounceMs);
    this.schedule(backendId, list, this.deps.debounceMs);
  }

  /** This member started watching the backend (or reconnected to it while watching): reload every list it offers. */
  watching(backend: { readonly id: string; readonly capabilities: ServerCapabilities | undefined }): void {
    for (const list of LIST_KINDS) this.schedule(backend.id, list, 0);
    this.relists(backend);
  }

  /**
   * This member still watches the backend: once a minute its periodic reloads are set again (a
   * member whose config lacks the backend stops them when it is given one to run, see the reload
   * job; a member that has it keeps them going).
   */
  stillWatching(backend: { readonly id: string; readonly capabilities: ServerCapabilities | undefined }): void {
    const now = this.deps.now();
    if (now - (this.relisted.get(backend.id) ?? Number.NEGATIVE_INFINITY) < RELISTS_AGAIN_MS) return;
    this.relists(backend);
  }

  /** One repeated reload per list the backend does not announce (`relistIntervalMs`), none for the others. */
  private relists(backend: { readonly id: string; readonly capabilities: ServerCapabilities | undefined }): void {
    this.relisted.set(backend.id, this.deps.now());
    const caps = backend.capabilities ?? {};
    const interval = this.deps.backends.find((b) => b.id === backend.id)?.relistIntervalMs ?? this.deps.relistIntervalMs;
    for (const list of LIST_KINDS) {
      const job: ClusterJob = { type: "reload", backendId: backend.id, list };
      const silent = caps[list] !== undefined && caps[list].listChanged !== true;
      const done = silent ? this.deps.jobs.repeat(jobKey(job), job, interval) : this.deps.jobs.stopRepeat(jobKey(job));
      done.catch((error: unknown) => this.deps.logger.warn({ backend: backend.id, list, err: (error as Error).message }, "cannot set the list's periodic reload"));
    }
  }

  /**
   * Schedules the reload job; one Redis refused (a failover under way, Redis away) is tried again,
   * 0.25 s doubling to 5 s, for as long as this member watches the backend: a change whose reload
   * was never scheduled would be lost until the backend's next one.
   */
  private schedule(backendId: string, list: ListKind, delayMs: number, attempt = 0): void {
    const job: ClusterJob = { type: "reload", backendId, list };
    this.deps.jobs.schedule(jobKey(job), job, delayMs).catch((error: unknown) => {
      const watching = this.deps.watching(backendId);
      this.deps.logger.warn({ backend: backendId, list, err: (error as Error).message, attempt }, watching ? "cannot schedule a list reload: trying again" : "cannot schedule a list reload (its new watcher reloads it)");
      if (!watching) return;
      const timer = setTimeout(() => this.schedule(backendId, list, delayMs, attempt + 1), Math.min(SCHEDULE_RETRY_MAX_MS, SCHEDULE_RETRY_MS * 2 ** attempt));
      timer.unref();
    });
  }
}

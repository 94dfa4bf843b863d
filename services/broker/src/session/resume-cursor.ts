import { createHash } from "node:crypto";
import { formatEventId, parseEventId, type EventId } from "../fanout/event-ids.js";

const VERSION = "1";
const TAGS_KEPT = 10_000;

/**
 * Resume cursors of listen streams (the `io.mcp-broker/cursor` extension): `1:<cluster>:<tag>:<event id>`,
 * where the cluster is this cluster's id and the tag a digest of the principal. A cursor names the
 * last event a client saw, so a listen that passes it back resumes from there on any member. One
 * from another cluster, another principal, or in any other form cannot be resumed from: the
 * listen then announces everything it honors once (nothing is lost).
 */
export class ResumeCursors {
  /**
   * Each principal's tag, kept: a listen names its prefix, and a digest per listen was ~2 % of a
   * broker's CPU in the bench's listen phases. Emptied when it grows past `TAGS_KEPT` principals.
   */
  private readonly tags = new Map<string, string>();

  constructor(private readonly clusterId: () => string) {}

  /** What every cursor of a principal's streams begins with; an event id completes it. */
  prefix(principal: string): string {
    let tag = this.tags.get(principal);
    if (tag === undefined) {
      if (this.tags.size >= TAGS_KEPT) this.tags.clear();
      tag = tagOf(principal);
      this.tags.set(principal, tag);
    }
    return `${VERSION}:${this.clusterId()}:${tag}:`;
  }

  format(principal: string, id: EventId): string {
    return `${this.prefix(principal)}${formatEventId(id)}`;
  }

  /** The event a cursor names, when it is this cluster's and this principal's. */
  parse(cursor: unknown, principal: string): EventId | undefined {
    if (typeof cursor !== "string") return undefined;
    const prefix = this.prefix(principal);
    return cursor.startsWith(prefix) ? parseEventId(cursor.slice(prefix.length)) : undefined;
  }
}

function tagOf(principal: string): string {
  return createHash("sha256").update(principal).digest("base64url").slice(0, 12);
}

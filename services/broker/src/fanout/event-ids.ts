/**
 * Where an event stands in the cluster's order: the position of the cluster event (a resource
 * update, a catalog change) and, for an event this broker made up itself (a re-announcement, its
 * own list change, a warning), how many of those came after that position here (`local`, 0 for a
 * cluster event). Every member receives cluster events in position order, so the ids on any one
 * stream increase.
 */
export interface EventId {
  readonly position: number;
  readonly local: number;
}

/** An event id as SSE writes it: `<position>`, or `<position>.<local>` for a local event. */
export function formatEventId(id: EventId): string {
  return id.local === 0 ? String(id.position) : `${id.position}.${id.local}`;
}

const EVENT_ID = /^(0|[1-9]\d{0,15})(?:\.([1-9]\d{0,15}))?$/;

/** An id in the form `formatEventId` writes (decimal digits only), or undefined for anything else. */
export function parseEventId(text: string): EventId | undefined {
  const match = EVENT_ID.exec(text);
  if (match === null) return undefined;
  const position = Number(match[1]);
  const local = match[2] === undefined ? 0 : Number(match[2]);
  return Number.isSafeInteger(position) && Number.isSafeInteger(local) ? { position, local } : undefined;
}

/** Whether `a` comes after `b`. */
export function isAfter(a: EventId, b: EventId): boolean {
  return a.position > b.position || (a.position === b.position && a.local > b.local);
}

/**
 * This broker's event clock: the newest cluster position it has passed on, and a counter for the
 * events it makes up itself, which take that position and the next count.
 */
export class EventClock {
  private position = 0;
  private local = 0;

  /**
   * A cluster event at `position` goes out. Positions arrive in order, but for a while after Redis
   * lost its counter they may start over below what went out: such an event takes the newest
   * position and the next count, so the ids on any one stream keep increasing (a cursor from that
   * while is not resumed exactly: see `UpdateLog.lostUpTo`).
   */
  cluster(position: number): EventId {
    if (position >= this.position) {
      this.position = position;
      return { position, local: 0 };
    }
    return { position: this.position, local: ++this.local };
  }

  /** An id for an event made up here, after everything passed on so far. */
  next(): EventId {
    return { position: this.position, local: ++this.local };
  }

  /**
   * Every cluster event handed out before `position` has been passed on (see
   * `SessionResume.caughtUp`): the clock moves up to it, so the events made up here from now on
   * come after it, and every cluster event still to come has a larger position anyway.
   */
  caughtUp(position: number): void {
    if (position > this.position) this.position = position;
  }

  /** The newest cluster position passed on. */
  newest(): number {
    return this.position;
  }
}

/**
 * What a resumption tells (`told`: updates and list changes at their own cluster positions), what
 * arrived live while it was being read (`held`), and what nobody could tell (`late`: announced
 * once, after the rest), in one stream order. A told or late notification is left out when a live
 * one about the same resource or list, at its position or later, is among the held: a live
 * notification was published after the stream subscribed (so after the watch began), and the
 * client that re-reads on it learns everything before it.
 */
export function resumeOrder<T extends { readonly id: EventId; subject(): string | undefined }>(told: readonly T[], held: readonly T[], late: readonly T[] = []): T[] {
  const live = new Map<string, EventId>();
  for (const event of held) {
    const subject = event.subject();
    if (subject === undefined) continue;
    const newest = live.get(subject);
    if (newest === undefined || isAfter(event.id, newest)) live.set(subject, event.id);
  }
  const coveredLive = (event: T): boolean => {
    const subject = event.subject();
    const newest = subject === undefined ? undefined : live.get(subject);
    return newest !== undefined && !isAfter(event.id, newest);
  };
  const ordered = [...told.filter((event) => !coveredLive(event)), ...held].sort((a, b) => (isAfter(a.id, b.id) ? 1 : isAfter(b.id, a.id) ? -1 : 0));
  return [...ordered, ...late.filter((event) => !live.has(event.subject() ?? ""))];
}

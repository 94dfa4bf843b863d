import { CHANNEL, type Bus, type BusMessage, type MemberCensus } from "@mcp-broker/shared";

/** The first of `items` whose JSON takes at most `maxChars` in all, and whether any were left out. */
export function withinChars<T>(items: readonly T[], maxChars: number): { items: T[]; truncated: boolean } {
  let used = 0;
  for (let i = 0; i < items.length; i++) {
    used += JSON.stringify(items[i]).length + 1;
    if (used > maxChars) return { items: items.slice(0, i), truncated: true };
  }
  return { items: [...items], truncated: false };
}

/** One member's answer to a census. */
export interface InstanceCensus extends MemberCensus {
  instance: string;
  /** The member that answered the console's request. */
  self: boolean;
}

/** How long a census waits for the other brokers' answers. */
const CENSUS_WAIT_MS = 500;

/**
 * The JSON characters each of a member's two lists may take in its answer (the rest are left out:
 * fewer listed than `count`). A census of thousands of long URIs was tens of MB on the bus: Redis
 * cut the asking member's subscriber connection (its pub/sub output buffer limit, 32 MB), and every
 * client of that member got a re-announcement, on every refresh of the console.
 */
const CENSUS_LIST_MAX_CHARS = 512 * 1024;

/** A subscription's URI is shown up to this many characters (a URI may have 16 KB), then `…`. */
const CENSUS_URI_CHARS = 512;

const shortened = (uri: string): string => (uri.length > CENSUS_URI_CHARS ? `${uri.slice(0, CENSUS_URI_CHARS)}…` : uri);

/** `census` with its URIs shortened and each list cut to CENSUS_LIST_MAX_CHARS. */
function bounded(census: MemberCensus): MemberCensus {
  const sessions = census.legacy.sessions.map((session) => ({ ...session, subscriptions: session.subscriptions.map(shortened) }));
  const streams = census.listens.streams.map((stream) => ({ ...stream, subscriptions: stream.subscriptions.map(shortened) }));
  return {
    legacy: { count: census.legacy.count, sessions: withinChars(sessions, CENSUS_LIST_MAX_CHARS).items },
    listens: { count: census.listens.count, streams: withinChars(streams, CENSUS_LIST_MAX_CHARS).items },
  };
}

/**
 * The operator console's view of every broker's sessions and listen streams: a census request on
 * `CHANNEL.console`, which every broker hears, and their answers on the asker's replies channel,
 * collected for `CENSUS_WAIT_MS`. Nothing is kept or sent while no console asks.
 */
export class ConsoleCensus {
  private next = 0;
  private readonly pending = new Map<number, InstanceCensus[]>();

  constructor(
    private readonly deps: {
      bus: Bus;
      instanceId: string;
      /** This member's own census. */
      local: (limit: number) => MemberCensus;
    },
  ) {}

  /** Every broker's sessions and streams (at most `limit` of each per broker), this one's first. */
  async take(limit: number): Promise<InstanceCensus[]> {
    const id = ++this.next;
    const answers: InstanceCensus[] = [];
    this.pending.set(id, answers);
    try {
      // Redis away: this member's own census still answers.
      const asked = this.deps.bus.publish(CHANNEL.console, { kind: "console.census", v: 1, origin: this.deps.instanceId, id, replyTo: CHANNEL.replies(this.deps.instanceId), limit }).catch(() => undefined);
      await Promise.all([asked, new Promise((resolve) => setTimeout(resolve, CENSUS_WAIT_MS))]);
    } finally {
      this.pending.delete(id);
    }
    // This member answers from memory, however the bus does.
    const others = answers.filter((answer) => answer.instance !== this.deps.instanceId);
    return [{ instance: this.deps.instanceId, self: true, ...bounded(this.deps.local(limit)) }, ...others.sort((a, b) => a.instance.localeCompare(b.instance))];
  }

  /** A `console.census` (another member's console asks) or `console.sessions` (an answer to ours). */
  receive(message: Extract<BusMessage, { kind: "console.census" | "console.sessions" }>): void {
    if (message.kind === "console.sessions") {
      this.pending.get(message.id)?.push({ instance: message.origin, self: false, ...message.census });
      return;
    }
    if (message.origin === this.deps.instanceId) return;
    const census = bounded(this.deps.local(message.limit));
    void this.deps.bus.publish(message.replyTo, { kind: "console.sessions", v: 1, origin: this.deps.instanceId, id: message.id, census }).catch(() => undefined);
  }
}

import { CHANNEL, type Bus, type BusMessage, type MemberCensus } from "@mcp-broker/shared";

/** One member's answer to a census. */
export interface InstanceCensus extends MemberCensus {
  instance: string;
  /** The member that answered the console's request. */
  self: boolean;
}

/** How long a census waits for the other brokers' answers. */
const CENSUS_WAIT_MS = 500;

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
    return [{ instance: this.deps.instanceId, self: true, ...this.deps.local(limit) }, ...others.sort((a, b) => a.instance.localeCompare(b.instance))];
  }

  /** A `console.census` (another member's console asks) or `console.sessions` (an answer to ours). */
  receive(message: Extract<BusMessage, { kind: "console.census" | "console.sessions" }>): void {
    if (message.kind === "console.sessions") {
      this.pending.get(message.id)?.push({ instance: message.origin, self: false, ...message.census });
      return;
    }
    if (message.origin === this.deps.instanceId) return;
    const census = this.deps.local(message.limit);
    void this.deps.bus.publish(message.replyTo, { kind: "console.sessions", v: 1, origin: this.deps.instanceId, id: message.id, census }).catch(() => undefined);
  }
}

import type { Bus, BusMessage } from "../bus.js";

/**
 * In-process bus. Messages are delivered on a microtask, so `publish` never re-enters the
 * publisher's call stack. Several instances may share one `MemoryBusHub` to model several
 * processes in one test.
 */
export class MemoryBusHub {
  private readonly members = new Set<MemoryBus>();

  join(bus: MemoryBus): void {
    this.members.add(bus);
  }

  leave(bus: MemoryBus): void {
    this.members.delete(bus);
  }

  deliver(channel: string, message: BusMessage): void {
    for (const member of this.members) member.receive(channel, message);
  }
}

export class MemoryBus implements Bus {
  private readonly channels = new Set<string>();
  private handler: ((channel: string, message: BusMessage) => void) | undefined;

  constructor(private readonly hub: MemoryBusHub = new MemoryBusHub()) {
    hub.join(this);
  }

  async publish(channel: string, message: BusMessage): Promise<void> {
    queueMicrotask(() => this.hub.deliver(channel, message));
  }

  async subscribe(channel: string): Promise<void> {
    this.channels.add(channel);
  }

  async unsubscribe(channel: string): Promise<void> {
    this.channels.delete(channel);
  }

  onMessage(handler: (channel: string, message: BusMessage) => void): void {
    this.handler = handler;
  }

  /** An in-process bus loses nothing. */
  onGap(): void {}

  /** @internal called by the hub */
  receive(channel: string, message: BusMessage): void {
    if (this.channels.has(channel)) this.handler?.(channel, message);
  }

  async close(): Promise<void> {
    this.channels.clear();
    this.hub.leave(this);
  }
}

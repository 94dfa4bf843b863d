import { systemClock, type Clock } from "../../clock.js";
import type { LeaseOptions, Leases } from "../leases.js";

export class MemoryLeases implements Leases {
  private readonly leases = new Map<string, { owner: string; expiresAt: number }>();

  constructor(private readonly clock: Clock = systemClock) {}

  /** One process holds every lease: there is never a gone holder to take over from, nor another to prefer (the options change nothing). */
  async acquire(name: string, owner: string, ttlMs: number, _options?: LeaseOptions): Promise<boolean> {
    const current = this.leases.get(name);
    if (current !== undefined && current.owner !== owner && current.expiresAt > this.clock.now()) return false;
    this.leases.set(name, { owner, expiresAt: this.clock.now() + ttlMs });
    return true;
  }

  async renew(name: string, owner: string, ttlMs: number, _options?: Pick<LeaseOptions, "preferred">): Promise<boolean> {
    const current = this.leases.get(name);
    if (current?.owner !== owner || current.expiresAt <= this.clock.now()) return false;
    current.expiresAt = this.clock.now() + ttlMs;
    return true;
  }

  async release(name: string, owner: string): Promise<void> {
    if (this.leases.get(name)?.owner === owner) this.leases.delete(name);
  }

  async holder(name: string): Promise<string | undefined> {
    const current = this.leases.get(name);
    return current !== undefined && current.expiresAt > this.clock.now() ? current.owner : undefined;
  }

  async close(): Promise<void> {
    this.leases.clear();
  }
}

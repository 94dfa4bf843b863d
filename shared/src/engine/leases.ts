/**
 * Named, expiring ownership (one lease holder per backend watches it). A holder must renew before
 * `ttlMs` passes; a lost lease is reported by `renew` returning false.
 */
export interface Leases {
  acquire(name: string, owner: string, ttlMs: number): Promise<boolean>;
  renew(name: string, owner: string, ttlMs: number): Promise<boolean>;
  release(name: string, owner: string): Promise<void>;
  holder(name: string): Promise<string | undefined>;
  close(): Promise<void>;
}

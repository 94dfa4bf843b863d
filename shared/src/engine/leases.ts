/**
 * Named, expiring ownership (one lease holder per backend watches it). A holder must renew before
 * `ttlMs` passes; a lost lease is reported by `renew` returning false. The Redis engine also hands
 * a lease over before it expires when its holder is gone: it missed a renewal and its bus
 * connection closed (the holder's replies channel has no listener); and a lease that lapsed while
 * its holder was alive (it stalled) stays that holder's to take back for three TTLs.
 */
export interface Leases {
  /**
   * Takes the lease when it is free or already `owner`'s. With `takeOver` (the default) also one
   * whose holder is gone (see above); without it, such a lease is left until its key expires.
   */
  acquire(name: string, owner: string, ttlMs: number, options?: LeaseOptions): Promise<boolean>;
  renew(name: string, owner: string, ttlMs: number, options?: Pick<LeaseOptions, "preferred">): Promise<boolean>;
  release(name: string, owner: string): Promise<void>;
  /** Who holds the lease (in the Redis engine also a live last holder of a lapsed one, which takes it back). */
  holder(name: string): Promise<string | undefined>;
  close(): Promise<void>;
}

export interface LeaseOptions {
  /** Also take a lease whose holder is gone (default true). */
  takeOver?: boolean;
  /**
   * The caller is a preferred holder (a worker): with `takeOver` it takes a lease from a holder that
   * is not preferred, alive or not, and while a preferred member is alive no other takes a lease
   * (Redis engine; one process holds every lease in the memory engine).
   */
  preferred?: boolean;
}

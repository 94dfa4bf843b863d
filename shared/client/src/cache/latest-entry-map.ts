/** Identifies one fetch of one entry; see `LatestEntryMap.begin`. */
export type FetchTicket = number;

/**
 * One entry per key, where the newest fetch wins: a fetch records a ticket when it starts, and
 * its outcome counts only if no later fetch of the same key started since and the key was not
 * cleared since. So a slow older fetch never overwrites a newer result, and a cleared entry is not
 * refilled by a fetch that was already under way.
 *
 * Every fetch must end in `settle` (an outcome: an entry, or `null` to remove it) or `abandon`
 * (no outcome; the entry stays as it was): either way its ticket is released.
 */
export class LatestEntryMap<T> {
  private readonly entries = new Map<string, T>();
  private readonly newest = new Map<string, FetchTicket>();
  private nextTicket: FetchTicket = 0;

  get(key: string): T | null {
    return this.entries.get(key) ?? null;
  }

  values(): IterableIterator<T> {
    return this.entries.values();
  }

  /** Marks the start of a fetch of `key`. */
  begin(key: string): FetchTicket {
    const ticket = ++this.nextTicket;
    this.newest.set(key, ticket);
    return ticket;
  }

  /** Stores `entry` (or removes the entry, for `null`) if `ticket` is still the newest fetch of `key`. */
  settle(key: string, ticket: FetchTicket, entry: T | null): boolean {
    if (this.newest.get(key) !== ticket) return false;
    this.newest.delete(key);
    if (entry === null) this.entries.delete(key);
    else this.entries.set(key, Object.freeze(entry)); // entries are read-only, however they were made
    return true;
  }

  /** Ends fetch `ticket` without an outcome: the entry stays as it was; older fetches stay void. */
  abandon(key: string, ticket: FetchTicket): void {
    if (this.newest.get(key) === ticket) this.newest.delete(key);
  }

  /** How many keys have a fetch under way. */
  get fetching(): number {
    return this.newest.size;
  }

  /** Removes the entry and voids the fetches of `key` under way. */
  clear(key: string): void {
    this.entries.delete(key);
    this.newest.delete(key);
  }

  clearAll(): void {
    this.entries.clear();
    this.newest.clear();
  }

  /** Removes every entry for which `keep` is false (fetches under way are not affected). */
  retain(keep: (key: string, entry: T) => boolean): void {
    for (const [key, entry] of this.entries) if (!keep(key, entry)) this.entries.delete(key);
  }
}

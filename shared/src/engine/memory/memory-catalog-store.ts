import type { CatalogKind, CatalogStore, ListBody, StoredList } from "../catalog-store.js";
import type { MemoryPositions } from "./memory-positions.js";

/** The catalog store of one process. Stored lists are copied in and out, as the Redis store's are. */
export class MemoryCatalogStore implements CatalogStore {
  private readonly lists = new Map<string, StoredList>();

  constructor(private readonly positions: MemoryPositions) {}

  async get(backendId: string, kind: CatalogKind): Promise<StoredList | undefined> {
    const stored = this.lists.get(`${backendId}\u0000${kind}`);
    return stored === undefined ? undefined : structuredClone(stored);
  }

  async put(backendId: string, kind: CatalogKind, expected: number, body: ListBody): Promise<StoredList | undefined> {
    const key = `${backendId}\u0000${kind}`;
    if ((this.lists.get(key)?.version ?? 0) !== expected) return undefined;
    const stored: StoredList = { ...structuredClone(body), version: expected + 1, position: this.positions.next() };
    this.lists.set(key, stored);
    return structuredClone(stored);
  }

  async close(): Promise<void> {}
}

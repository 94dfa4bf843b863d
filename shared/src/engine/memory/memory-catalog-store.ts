import { CHANNEL, type Bus } from "../bus.js";
import type { CatalogKind, CatalogStore, ListChange, StoredList } from "../catalog-store.js";
import type { MemoryPositions } from "./memory-positions.js";

/** The catalog store of one process. Stored lists are copied in and out, as the Redis store's are. */
export class MemoryCatalogStore implements CatalogStore {
  private readonly lists = new Map<string, StoredList>();

  constructor(
    private readonly positions: MemoryPositions,
    private readonly bus: Bus,
  ) {}

  async get(backendId: string, kind: CatalogKind): Promise<StoredList | undefined> {
    const stored = this.lists.get(`${backendId}\u0000${kind}`);
    return stored === undefined ? undefined : structuredClone(stored);
  }

  async put(backendId: string, changes: readonly ListChange[], origin: string): Promise<StoredList[] | undefined> {
    if (changes.some(({ kind, expected }) => (this.lists.get(`${backendId}\u0000${kind}`)?.version ?? 0) !== expected)) return undefined;
    const position = this.positions.next();
    const stored = changes.map(({ kind, expected, body }): StoredList => {
      const list = { ...structuredClone(body), version: expected + 1, position };
      this.lists.set(`${backendId}\u0000${kind}`, list);
      return list;
    });
    const lists = changes.map(({ kind, body }, i) => ({ kind, body: structuredClone(body), version: stored[i]!.version }));
    await this.bus.publish(CHANNEL.catalog, { kind: "catalog.changed", v: 1, origin, backendId, lists, position });
    return structuredClone(stored);
  }

  async close(): Promise<void> {}
}

import { z } from "zod";

/** The four lists a backend offers. */
export const CATALOG_KINDS = ["tools", "prompts", "resources", "resourceTemplates"] as const;
export type CatalogKind = (typeof CATALOG_KINDS)[number];

/** A tool the tool gate holds back (see the broker's tool gate). */
export const heldToolSchema = z.object({ backendId: z.string(), name: z.string(), hash: z.string(), pinned: z.string().optional() });
export type HeldTool = z.infer<typeof heldToolSchema>;

/** What is stored of one backend's list of one kind. */
export const listBodySchema = z.object({
  /** The backend's definitions as it listed them (its own names and URIs), in its order. */
  items: z.array(z.record(z.string(), z.unknown())),
  /** Tools only, for backends whose tool changes are held: the pinned hashes and what is held now. */
  gate: z.object({ pins: z.record(z.string(), z.string()), held: z.array(heldToolSchema) }).optional(),
});
export type ListBody = z.infer<typeof listBodySchema>;

export interface StoredList extends ListBody {
  /** 1 for the first stored list, one more for each change. */
  version: number;
  /** The cluster position of the change (see `Positions`): comparable with resource update positions. */
  position: number;
  /** Set when what is stored does not decode (then `items` is empty): never applied, replaced by the next reload. */
  invalid?: string;
}

/** One kind's new list, over the version it was compared against. */
export interface ListChange {
  kind: CatalogKind;
  expected: number;
  body: ListBody;
}

/**
 * The cluster's catalog: each backend's lists as last fetched, versioned per (backend, kind). A
 * reload stores a list only when it changed, and only over the version it compared against, so two
 * writers racing cannot lose one's change unseen (the loser reads again). Every member applies what
 * is stored instead of listing the backend itself.
 */
export interface CatalogStore {
  get(backendId: string, kind: CatalogKind): Promise<StoredList | undefined>;
  /**
   * Stores each change's `body` as the next version of its kind when the stored version is still
   * its `expected` (0: nothing stored), all or none, at one new position, and in the same step
   * announces them on the bus (one `catalog.changed` on `CHANNEL.catalog`, from `origin`, with the
   * bodies, versions and position); resolves with what was stored, in the order given, or
   * undefined when another writer stored first (nothing stored or announced).
   */
  put(backendId: string, changes: readonly ListChange[], origin: string): Promise<StoredList[] | undefined>;
  close(): Promise<void>;
}

/**
 * A counter of events for the whole cluster: each resource update and each catalog change gets the
 * next position, so any member can tell what happened after a position a client last saw.
 */
export interface Positions {
  /** The newest position handed out. */
  current(): Promise<number>;
}

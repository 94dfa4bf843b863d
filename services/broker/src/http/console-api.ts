import type { IncomingMessage, ServerResponse } from "node:http";
import type { BackendStatus, Member } from "@mcp-broker/member";
import type { HeldTool, SubscriptionRegistry } from "@mcp-broker/shared";
import type { Catalog, CatalogKind } from "../catalog/catalog.js";
import type { EdgeSecurity } from "./edge-security.js";
import type { ConsoleCensus, InstanceCensus } from "./console-census.js";
import { sendJson } from "./mcp-endpoint.js";

/** One resource as the operator console shows it. */
export interface ConsoleResource {
  /** The broker's name for it. */
  uri: string;
  backend: string;
  name: string;
  mimeType?: string;
  /** Subscriptions to it across the whole cluster. */
  subscribers: number;
  /** How it is watched upstream now (see `ConsoleData.resources`). */
  upstream: "subscribed" | "polling" | "none";
  /** Whether the backend lists it (false: a subscribed template match or sub-resource). */
  listed: boolean;
}

/** A backend as the console shows it: its state on this instance, and which instance watches it for the cluster. */
export interface ConsoleBackend extends BackendStatus {
  /** The instance holding the backend's watcher lease (undefined: none right now). */
  watcher?: string;
}

/** What the console reads; every call is cluster-wide where the engine is. */
export interface ConsoleData {
  /** Every listed resource and every subscribed one that is not listed, with its subscriber count. */
  resources(): Promise<ConsoleResource[]>;
  backends(): Promise<ConsoleBackend[]>;
  /** Every broker's legacy sessions and listen streams (at most `limit` of each per broker). */
  sessions(limit: number): Promise<InstanceCensus[]>;
  /** The aggregated catalog as clients see it, each item with its backend, and the tools held back. */
  catalog(): Promise<ConsoleCatalog>;
}

/** The aggregated catalog (`/console/api/catalog`). */
export interface ConsoleCatalog {
  tools: ConsoleItem[];
  prompts: ConsoleItem[];
  resources: ConsoleItem[];
  resourceTemplates: ConsoleItem[];
  /** Tools held back by `toolChanges: "hold"` or `pinnedTools`, by the broker's name for them. */
  held: (HeldTool & { exposedName: string })[];
}

/** One catalog item: its definition as clients get it, and its backend. */
export type ConsoleItem = Record<string, unknown> & { backend: string };

/** Sessions and streams per broker the sessions API lists by default, and at most. */
const SESSIONS_DEFAULT_LIMIT = 200;
const SESSIONS_MAX_LIMIT = 5_000;

/** Who may use the console: `adminKeys` (Bearer), or with none configured, requests from this machine only. */
export interface ConsoleAccess {
  /** Host and Origin checks as on `/mcp`, then the admin keys (none configured: no key asked). */
  security: EdgeSecurity;
  /** No admin key is configured: only loopback requests that no proxy forwarded are let in. */
  localOnly: boolean;
}

const API = "/console/api/";

/**
 * The console's reads, from the catalog this member serves and the cluster's registry and leases.
 * `pushes`: whether a backend sends its own updates (else its watcher polls it).
 */
export function consoleData(deps: {
  catalog: Catalog;
  registry: Pick<SubscriptionRegistry, "count" | "wanted">;
  member: Pick<Member, "backends" | "watcherOf">;
  pushes: (backendId: string) => boolean;
  census: Pick<ConsoleCensus, "take">;
  heldTools: () => HeldTool[];
}): ConsoleData {
  const { catalog, registry, member, pushes, census, heldTools } = deps;
  const items = (kind: CatalogKind): ConsoleItem[] => catalog.list(kind).map((item) => ({ ...item.exposed, backend: item.backendId }));
  const row = (backend: string, uri: string, name: string, subscribers: number, listed: boolean, mimeType?: string): ConsoleResource => ({
    uri,
    backend,
    name,
    ...(mimeType !== undefined && { mimeType }),
    subscribers,
    upstream: subscribers === 0 ? "none" : pushes(backend) ? "subscribed" : "polling",
    listed,
  });
  return {
    resources: async () => {
      const listed = catalog.list("resources");
      const rows = await Promise.all(
        listed.map(async (item) => {
          const mimeType = typeof item.exposed.mimeType === "string" ? item.exposed.mimeType : undefined;
          const name = typeof item.exposed.name === "string" ? item.exposed.name : item.exposedKey;
          return row(item.backendId, item.exposedKey, name, await registry.count(item.backendId, item.key), true, mimeType);
        }),
      );
      // Subscribed but not listed (template matches, sub-resources): the registry's wanted sets.
      const known = new Set(listed.map((item) => `${item.backendId}\u0000${item.key}`));
      for (const { id } of member.backends()) {
        for (const uri of await registry.wanted(id)) {
          if (known.has(`${id}\u0000${uri}`)) continue;
          const exposed = catalog.exposeUri(id, uri);
          rows.push(row(id, exposed, exposed, await registry.count(id, uri), false));
        }
      }
      return rows;
    },
    sessions: (limit) => census.take(limit),
    catalog: async () => ({
      tools: items("tools"),
      prompts: items("prompts"),
      resources: items("resources"),
      resourceTemplates: items("resourceTemplates"),
      held: heldTools().map((held) => ({ ...held, exposedName: catalog.exposeName(held.backendId, held.name) })),
    }),
    backends: () =>
      Promise.all(
        member.backends().map(async (backend) => {
          const watcher = await member.watcherOf(backend.id);
          return watcher === undefined ? backend : { ...backend, watcher };
        }),
      ),
  };
}

/**
 * The operator console's JSON API (`console.enabled`), under `/console/api/`: `resources`,
 * `backends`, `sessions` and `catalog`. Answers only what it serves (returns false for any other path). Every request passes
 * the Host and Origin checks of `/mcp` and then needs an admin key, except, when no admin key is
 * configured, a request from this machine that no proxy forwarded.
 */
export function serveConsole(req: IncomingMessage, res: ServerResponse, access: ConsoleAccess, data: ConsoleData): boolean {
  const path = (req.url ?? "/").split("?")[0] ?? "/";
  if (path !== "/console" && !path.startsWith("/console/")) return false;
  req.resume();
  const verdict = access.security.check(req);
  if (!verdict.ok) {
    sendJson(res, verdict.status, { error: verdict.message }, verdict.headers);
    return true;
  }
  if (access.localOnly && !fromThisMachine(req)) {
    sendJson(res, 403, { error: "The console answers requests from this machine only while console.adminKeys is empty; configure an admin key to reach it from elsewhere." });
    return true;
  }
  if (req.method !== "GET") {
    sendJson(res, 405, { error: `Method ${req.method ?? "?"} not allowed; use GET.` }, { allow: "GET" });
    return true;
  }
  let read: Promise<unknown> | undefined;
  if (path === `${API}resources`) read = data.resources().then((resources) => ({ resources }));
  else if (path === `${API}backends`) read = data.backends().then((backends) => ({ backends }));
  else if (path === `${API}catalog`) read = data.catalog();
  else if (path === `${API}sessions`) {
    const limit = new URL(req.url ?? "/", "http://console").searchParams.get("limit");
    const n = limit === null ? SESSIONS_DEFAULT_LIMIT : Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > SESSIONS_MAX_LIMIT) {
      sendJson(res, 400, { error: `limit must be a whole number from 1 to ${SESSIONS_MAX_LIMIT}.` });
      return true;
    }
    read = data.sessions(n).then((instances) => ({ instances }));
  }
  if (read === undefined) {
    sendJson(res, 404, { error: `Not found: the console's API is ${API}resources, ${API}backends, ${API}sessions and ${API}catalog.` });
    return true;
  }
  read.then(
    (body) => sendJson(res, 200, body, { "cache-control": "no-store" }),
    (error: unknown) => sendJson(res, 503, { error: `The cluster's state could not be read: ${(error as Error).message}` }),
  );
  return true;
}

/** A loopback peer, and no sign of a proxy in between (a proxy on this machine would make every request look local). */
function fromThisMachine(req: IncomingMessage): boolean {
  const peer = req.socket.remoteAddress ?? "";
  const loopback = peer === "::1" || peer.startsWith("127.") || peer.startsWith("::ffff:127.");
  return loopback && req.headers["x-forwarded-for"] === undefined && req.headers.forwarded === undefined && req.headers["x-real-ip"] === undefined;
}

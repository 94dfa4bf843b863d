import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { BackendStatus, Member } from "@mcp-broker/member";
import type { HeldTool, SubscriptionRegistry, UpdateLog } from "@mcp-broker/shared";
import type { Catalog, CatalogKind } from "../catalog/catalog.js";
import type { EdgeSecurity } from "./edge-security.js";
import { withinChars, type ConsoleCensus, type InstanceCensus } from "./console-census.js";
import type { ConsoleFeed } from "./console-feed.js";
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
  upstream: "subscribed" | "polling" | "unavailable" | "none";
  /** Whether the backend lists it (false: a subscribed template match or sub-resource). */
  listed: boolean;
  /** When its last update arrived (epoch ms), while it is watched; absent: none since its watch began. */
  lastUpdate?: number;
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
  /** Opens the live feed on `res` (see `ConsoleFeed`); false when no more can be opened. */
  feed(res: ServerResponse): boolean;
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

/**
 * The JSON characters the resources list may take: past it the list is cut and the answer says
 * `truncated: true`. URIs reach 16 KB and a control character takes 6 in JSON, so a few thousand
 * subscribed URIs once made an answer longer than V8's longest string, and the broker died.
 */
const RESOURCES_MAX_CHARS = 8 * 1024 * 1024;

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

/** A subscribed resource's upstream state by how its backend's updates reach it: pushed, polled, or nothing while its backend is not connected here. */
const UPSTREAM = { push: "subscribed", poll: "polling", none: "unavailable" } as const;

/** A resource the console lists, before its counts and times are read. */
interface Resource {
  backend: string;
  /** The backend's URI. */
  key: string;
  uri: string;
  name: string;
  listed: boolean;
  mimeType?: string;
}

/**
 * The console's reads, from the catalog this member serves and the cluster's registry and leases.
 * `delivery`: how a backend's updates reach its subscribers (see `MetaToolsDeps.updates`).
 */
export function consoleData(deps: {
  catalog: Catalog;
  registry: Pick<SubscriptionRegistry, "count" | "wanted">;
  updates: Pick<UpdateLog, "updatedAt">;
  member: Pick<Member, "backends" | "watcherOf">;
  delivery: (backendId: string) => "push" | "poll" | "none";
  census: Pick<ConsoleCensus, "take">;
  heldTools: () => HeldTool[];
  feed: Pick<ConsoleFeed, "open">;
}): ConsoleData {
  const { catalog, registry, updates, member, delivery, census, heldTools } = deps;
  const items = (kind: CatalogKind): ConsoleItem[] => catalog.list(kind).map((item) => ({ ...item.exposed, backend: item.backendId }));
  return {
    resources: async () => {
      // Every listed resource, then what is subscribed but not listed (template matches, sub-resources): the registry's wanted sets.
      const found: Resource[] = catalog.list("resources").map((item) => ({
        backend: item.backendId,
        key: item.key,
        uri: item.exposedKey,
        name: typeof item.exposed.name === "string" ? item.exposed.name : item.exposedKey,
        listed: true,
        ...(typeof item.exposed.mimeType === "string" && { mimeType: item.exposed.mimeType }),
      }));
      const known = new Set(found.map((resource) => `${resource.backend}\u0000${resource.key}`));
      for (const { id } of member.backends()) {
        for (const key of await registry.wanted(id)) {
          if (known.has(`${id}\u0000${key}`)) continue;
          const uri = catalog.exposeUri(id, key);
          found.push({ backend: id, key, uri, name: uri, listed: false });
        }
      }
      const counts = await Promise.all(found.map((resource) => registry.count(resource.backend, resource.key)));
      // When each was last updated: one read per backend.
      const times = new Map<Resource, number | undefined>();
      await Promise.all(
        [...new Set(found.map((resource) => resource.backend))].map(async (backend) => {
          const ofBackend = found.filter((resource) => resource.backend === backend);
          const at = await updates.updatedAt(backend, ofBackend.map((resource) => resource.key));
          ofBackend.forEach((resource, i) => times.set(resource, at[i]));
        }),
      );
      return found.map((resource, i) => {
        const subscribers = counts[i] ?? 0;
        const lastUpdate = times.get(resource);
        return {
          uri: resource.uri,
          backend: resource.backend,
          name: resource.name,
          ...(resource.mimeType !== undefined && { mimeType: resource.mimeType }),
          subscribers,
          upstream: subscribers === 0 ? "none" : UPSTREAM[delivery(resource.backend)],
          listed: resource.listed,
          ...(lastUpdate !== undefined && { lastUpdate }),
        };
      });
    },
    sessions: (limit) => census.take(limit),
    catalog: async () => ({
      tools: items("tools"),
      prompts: items("prompts"),
      resources: items("resources"),
      resourceTemplates: items("resourceTemplates"),
      held: heldTools().map((held) => ({ ...held, exposedName: catalog.exposeName(held.backendId, held.name) })),
    }),
    feed: (res) => deps.feed.open(res),
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
 * The operator console (`console.enabled`): its page at `/console`, its assets under
 * `/console/assets/`, and its API under `/console/api/`: `resources`, `backends`, `sessions`,
 * `catalog` (JSON) and `feed` (Server-Sent Events). Answers only what it serves (returns false for
 * any other path). Every request passes the Host and Origin checks of `/mcp` and then needs an admin
 * key (Bearer, or as a Basic password, which browsers ask for), except, when no admin key is
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
  if (req.method !== "GET" && req.method !== "HEAD") {
    sendJson(res, 405, { error: `Method ${req.method ?? "?"} not allowed; use GET.` }, { allow: "GET, HEAD" });
    return true;
  }
  if (!path.startsWith(API)) {
    servePage(path, req, res);
    return true;
  }
  let read: Promise<unknown> | undefined;
  if (path === `${API}resources`) {
    read = data.resources().then((all) => {
      const { items: resources, truncated } = withinChars(all, RESOURCES_MAX_CHARS);
      return { resources, ...(truncated && { truncated: true, total: all.length }) };
    });
  }
  else if (path === `${API}backends`) read = data.backends().then((backends) => ({ backends }));
  else if (path === `${API}catalog`) read = data.catalog();
  else if (path === `${API}feed`) {
    if (req.method !== "GET") sendJson(res, 405, { error: "The feed is an event stream: use GET." }, { allow: "GET" });
    else if (!data.feed(res)) sendJson(res, 429, { error: "Too many console feeds are open on this broker; close one." });
    return true;
  } else if (path === `${API}sessions`) {
    const limit = new URL(req.url ?? "/", "http://console").searchParams.get("limit");
    const n = limit === null ? SESSIONS_DEFAULT_LIMIT : Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > SESSIONS_MAX_LIMIT) {
      sendJson(res, 400, { error: `limit must be a whole number from 1 to ${SESSIONS_MAX_LIMIT}.` });
      return true;
    }
    read = data.sessions(n).then((instances) => ({ instances }));
  }
  if (read === undefined) {
    sendJson(res, 404, { error: `Not found: the console's API is ${API}resources, ${API}backends, ${API}sessions, ${API}catalog and ${API}feed.` });
    return true;
  }
  read
    .then(
      (body) => {
        try {
          sendJson(res, 200, body, { "cache-control": "no-store" });
        } catch (error) {
          // Never a crash for an answer that cannot be made (see RESOURCES_MAX_CHARS).
          sendJson(res, 500, { error: `The answer could not be made: ${(error as Error).message}` });
        }
      },
      (error: unknown) => sendJson(res, 503, { error: `The cluster's state could not be read: ${(error as Error).message}` }),
    )
    .catch(() => res.destroy());
  return true;
}

/** The console's built front end: `npm run build` puts it beside this module's directory in dist (the second place: this module run from src). */
const PAGES = [new URL("../console/", import.meta.url), new URL("../../dist/console/", import.meta.url)];
const PAGE_TYPES: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };
const pageCache = new Map<string, Buffer>();

/** `/console/` gives the page (`/console` redirects there: the page's paths are relative); `/console/assets/<file>` its scripts and styles. */
function servePage(path: string, req: IncomingMessage, res: ServerResponse): void {
  if (path === "/console") {
    res.writeHead(308, { location: "/console/" }).end();
    return;
  }
  const asset = /^\/console\/(assets\/[a-z0-9-]+\.(?:js|css|svg))$/.exec(path)?.[1];
  const file = path === "/console/" ? "index.html" : asset;
  const type = file === undefined ? undefined : PAGE_TYPES[file.slice(file.lastIndexOf("."))];
  if (file === undefined || type === undefined) {
    sendJson(res, 404, { error: `Not found: the console is at /console.` });
    return;
  }
  // What is found is kept (the build does not change under a running broker); what is not, looked for again.
  let body = pageCache.get(file);
  for (const dir of body === undefined ? PAGES : []) {
    try {
      body = readFileSync(new URL(file, dir));
      pageCache.set(file, body);
      break;
    } catch {
      // Not here.
    }
  }
  if (body === undefined) {
    sendJson(res, file === "index.html" ? 503 : 404, { error: file === "index.html" ? "The console's front end is not built: run npm run build." : "Not found." });
    return;
  }
  res.writeHead(200, {
    "content-type": type,
    "content-length": body.length,
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  });
  res.end(req.method === "HEAD" ? undefined : body);
}

/** A loopback peer, and no sign of a proxy in between (a proxy on this machine would make every request look local). */
function fromThisMachine(req: IncomingMessage): boolean {
  const peer = req.socket.remoteAddress ?? "";
  const loopback = peer === "::1" || peer.startsWith("127.") || peer.startsWith("::ffff:127.");
  return loopback && req.headers["x-forwarded-for"] === undefined && req.headers.forwarded === undefined && req.headers["x-real-ip"] === undefined;
}

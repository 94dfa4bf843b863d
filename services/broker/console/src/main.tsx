import { render } from "preact";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import type { ConsoleBackend, ConsoleCatalog, ConsoleResource } from "../../src/http/console-api.js";
import type { InstanceCensus } from "../../src/http/console-census.js";
import "./style.css";

// The broker's console API (README, "Operations"); every path is relative to the page (/console/).

type Resource = ConsoleResource;
type Backend = ConsoleBackend;
type Instance = InstanceCensus;
type Catalog = ConsoleCatalog;
type Diff = { added: string[]; removed: string[]; changed: string[] };
type FeedEntry =
  | { id: number; type: "update"; at: number; backend: string; uri: string; instance: string }
  | { id: number; type: "dropped"; at: number; count: number; instance: string }
  | { id: number; type: "list_changed"; at: number; list: string; changes: Record<string, Diff> };

/** A feed entry before it is numbered. */
type NewEntry = FeedEntry extends infer E ? (E extends FeedEntry ? Omit<E, "id"> : never) : never;

const TABS = ["resources", "sessions", "backends", "catalog", "feed"] as const;
type Tab = (typeof TABS)[number];
const TAB_TITLES: Record<Tab, string> = { resources: "Resources", sessions: "Sessions", backends: "Backends", catalog: "Catalog", feed: "Live feed" };
const FEED_MAX = 300;

/** Reads `path` now, every `everyMs` while the page is visible, and whenever `bump` changes; one read at a time. */
function usePoll<T>(path: string, everyMs: number, bump: number): { data: T | undefined; error: string | undefined } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    const stop = new AbortController();
    let reading = false;
    const read = async (): Promise<void> => {
      if (document.hidden || reading) return;
      reading = true;
      try {
        const res = await fetch(path, { headers: { accept: "application/json" }, signal: stop.signal });
        const body = (await res.json()) as T & { error?: string };
        if (!res.ok) setError(body.error ?? `HTTP ${res.status}`);
        else {
          setData(body);
          setError(undefined);
        }
      } catch (e) {
        if (!stop.signal.aborted) setError((e as Error).message);
      } finally {
        reading = false;
      }
    };
    void read();
    const timer = setInterval(() => void read(), everyMs);
    return () => {
      stop.abort();
      clearInterval(timer);
    };
  }, [path, everyMs, bump]);
  return { data, error };
}

/** The time now, in seconds, from one ticker for the whole page. */
const nowListeners = new Set<(now: number) => void>();
setInterval(() => {
  const now = Date.now();
  for (const listener of nowListeners) listener(now);
}, 1000);
function useNow(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    nowListeners.add(setNow);
    return () => void nowListeners.delete(setNow);
  }, []);
  return now;
}

/** Re-reads follow the feed at most this often. */
const BUMP_EVERY_MS = 2000;

/** The live feed: one EventSource (opened again if it gives up), the newest entries first. */
function useFeed(): { entries: FeedEntry[]; connected: boolean; instance: string | undefined; bump: number; listBump: number } {
  const [entries, setEntries] = useState<FeedEntry[]>([]);
  const [connected, setConnected] = useState(false);
  const [instance, setInstance] = useState<string>();
  /** Bumped (at most every BUMP_EVERY_MS) by every entry (resources re-read), and by list changes only (the catalog re-read). */
  const [bump, setBump] = useState(0);
  const [listBump, setListBump] = useState(0);
  const next = useRef(0);
  useEffect(() => {
    let source: EventSource | undefined;
    let reopen: ReturnType<typeof setTimeout> | undefined;
    let bumpLater: ReturnType<typeof setTimeout> | undefined;
    let lists = false;
    const later = (list: boolean): void => {
      lists ||= list;
      bumpLater ??= setTimeout(() => {
        bumpLater = undefined;
        setBump((n) => n + 1);
        if (lists) setListBump((n) => n + 1);
        lists = false;
      }, BUMP_EVERY_MS);
    };
    const add = (more: NewEntry[], list: boolean): void => {
      const numbered = more.map((entry) => ({ ...entry, id: ++next.current }));
      setEntries((old) => [...numbered.reverse(), ...old].slice(0, FEED_MAX));
      later(list);
    };
    const open = (): void => {
      const feed = new EventSource("api/feed");
      source = feed;
      feed.addEventListener("open", () => setConnected(true));
      feed.addEventListener("error", () => {
        setConnected(false);
        // EventSource retries by itself, except after an HTTP error (401, 429): then in a while.
        if (feed.readyState === EventSource.CLOSED) reopen = setTimeout(open, 5000);
      });
      feed.addEventListener("hello", (e) => setInstance((JSON.parse(e.data as string) as { instance: string }).instance));
      feed.addEventListener("update", (e) => {
        const body = JSON.parse(e.data as string) as { instance: string; updates: { backend: string; uri: string; at: number }[]; dropped: number };
        const more: NewEntry[] = body.updates.map((u) => ({ type: "update", at: u.at, backend: u.backend, uri: u.uri, instance: body.instance }));
        if (body.dropped > 0) more.push({ type: "dropped", at: Date.now(), count: body.dropped, instance: body.instance });
        add(more, false);
      });
      feed.addEventListener("list_changed", (e) => {
        const body = JSON.parse(e.data as string) as { list: string; at: number; changes: Record<string, Diff> };
        add([{ type: "list_changed", at: body.at, list: body.list, changes: body.changes }], true);
      });
    };
    open();
    return () => {
      source?.close();
      clearTimeout(reopen);
      clearTimeout(bumpLater);
    };
  }, []);
  return { entries, connected, instance, bump, listBump };
}

function ago(at: number | undefined, now: number): string {
  if (at === undefined || at === 0) return "—";
  const s = Math.max(0, Math.round((now - at) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

function Time({ at }: { at: number | undefined }) {
  const now = useNow();
  if (at === undefined || at === 0) return <span class="muted">—</span>;
  const iso = new Date(at).toISOString();
  return (
    <time dateTime={iso} title={iso}>
      {ago(at, now)}
    </time>
  );
}

function Problem({ error }: { error: string | undefined }) {
  return error === undefined ? null : (
    <p class="problem" role="alert">
      {error}
    </p>
  );
}

function Search(props: { label: string; value: string; onInput: (value: string) => void }) {
  return (
    <label class="field">
      <span>{props.label}</span>
      <input type="search" value={props.value} onInput={(e) => props.onInput(e.currentTarget.value)} data-search />
    </label>
  );
}

function Choice(props: { label: string; value: string; options: string[]; onChange: (value: string) => void }) {
  return (
    <label class="field">
      <span>{props.label}</span>
      <select value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        <option value="">all</option>
        {props.options.map((option) => (
          <option key={option} value={option}>
            {option}
          </option>
        ))}
      </select>
    </label>
  );
}

const distinct = (values: (string | undefined)[]): string[] => [...new Set(values.filter((v): v is string => v !== undefined && v !== ""))].sort();
const matches = (query: string, ...texts: unknown[]): boolean => {
  const q = query.trim().toLowerCase();
  return q === "" || texts.some((text) => typeof text === "string" && text.toLowerCase().includes(q));
};

function ResourcesView({ bump }: { bump: number }) {
  const { data, error } = usePoll<{ resources: Resource[]; truncated?: boolean; total?: number }>("api/resources", 2000, bump);
  const [query, setQuery] = useState("");
  const [backend, setBackend] = useState("");
  const [mime, setMime] = useState("");
  const all = data?.resources ?? [];
  const shown = all.filter((r) => (backend === "" || r.backend === backend) && (mime === "" || r.mimeType === mime) && matches(query, r.uri, r.name));
  return (
    <section aria-label="Resources">
      <div class="filters">
        <Search label="Search" value={query} onInput={setQuery} />
        <Choice label="Server" value={backend} options={distinct(all.map((r) => r.backend))} onChange={setBackend} />
        <Choice label="MIME type" value={mime} options={distinct(all.map((r) => r.mimeType))} onChange={setMime} />
      </div>
      <Problem error={error} />
      <p class="count">
        {shown.length} of {all.length} resources · {all.reduce((n, r) => n + r.subscribers, 0)} subscriptions cluster-wide
        {data?.truncated === true && ` · the first ${all.length} of ${data.total ?? "?"} (the list is cut at 8 MB)`}
      </p>
      <div class="table">
        <table>
          <thead>
            <tr>
              <th scope="col">URI</th>
              <th scope="col">Server</th>
              <th scope="col" class="wide">
                Name
              </th>
              <th scope="col" class="wide">
                MIME type
              </th>
              <th scope="col" class="num">
                Subscribers
              </th>
              <th scope="col">Upstream</th>
              <th scope="col">Last update</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((r) => (
              <tr key={`${r.backend} ${r.uri}`} data-uri={r.uri}>
                <td class="mono">
                  {r.uri}
                  {!r.listed && <span class="tag">not listed</span>}
                </td>
                <td>{r.backend}</td>
                <td class="wide">{r.name}</td>
                <td class="wide">{r.mimeType ?? "—"}</td>
                <td class="num" data-subscribers>
                  {r.subscribers}
                </td>
                <td>
                  <span class={`state ${r.upstream}`}>{r.upstream}</span>
                </td>
                <td>
                  <Time at={r.lastUpdate} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function SessionsView() {
  const { data, error } = usePoll<{ instances: Instance[] }>("api/sessions", 3000, 0);
  /** What the API lists per broker without a `limit`. */
  const limit = 200;
  const [query, setQuery] = useState("");
  const instances = data?.instances ?? [];
  return (
    <section aria-label="Sessions">
      <div class="filters">
        <Search label="Principal, session or URI" value={query} onInput={setQuery} />
      </div>
      <Problem error={error} />
      {instances.map((instance) => {
        const sessions = instance.legacy.sessions.filter((s) => matches(query, s.principal, s.sessionId, ...s.subscriptions));
        const streams = instance.listens.streams.filter((s) => matches(query, s.principal, s.id, ...s.subscriptions));
        return (
          <article key={instance.instance} class="instance">
            <h2>
              <span class="mono">{instance.instance}</span> {instance.self && <span class="tag">this instance</span>}
            </h2>
            <p class="count">
              {instance.legacy.count} legacy sessions · {instance.listens.count} listen streams
              {(instance.legacy.sessions.length < Math.min(instance.legacy.count, limit) || instance.listens.streams.length < Math.min(instance.listens.count, limit)) &&
                ` · fewer listed: each list of a broker's answer is cut at 512 KB`}
            </p>
            <div class="table">
              <table>
                <caption>Legacy sessions</caption>
                <thead>
                  <tr>
                    <th scope="col">Session</th>
                    <th scope="col">Principal</th>
                    <th scope="col" class="wide">
                      Protocol
                    </th>
                    <th scope="col">Subscriptions</th>
                    <th scope="col" class="wide">
                      Stream
                    </th>
                    <th scope="col">Last activity</th>
                  </tr>
                </thead>
                <tbody>
                  {sessions.map((s) => (
                    <tr key={s.sessionId}>
                      <td class="mono">{s.sessionId}</td>
                      <td>{s.principal}</td>
                      <td class="wide">{s.protocolVersion}</td>
                      <td class="mono list">{s.subscriptions.length === 0 ? <span class="muted">none</span> : s.subscriptions.join("\n")}</td>
                      <td class="wide">{s.streaming ? "open" : "closed"}</td>
                      <td>
                        <Time at={s.lastActive} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <div class="table">
              <table>
                <caption>Listen streams (2026-07-28)</caption>
                <thead>
                  <tr>
                    <th scope="col">Stream</th>
                    <th scope="col">Principal</th>
                    <th scope="col">Subscriptions</th>
                    <th scope="col">Open since</th>
                  </tr>
                </thead>
                <tbody>
                  {streams.map((s) => (
                    <tr key={s.id}>
                      <td class="mono">{s.id}</td>
                      <td>{s.principal}</td>
                      <td class="mono list">{s.subscriptions.join("\n")}</td>
                      <td>
                        <Time at={s.since} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </article>
        );
      })}
    </section>
  );
}

function BackendsView() {
  const { data, error } = usePoll<{ backends: Backend[] }>("api/backends", 3000, 0);
  return (
    <section aria-label="Backends">
      <Problem error={error} />
      <div class="table">
        <table>
          <thead>
            <tr>
              <th scope="col">Backend</th>
              <th scope="col">State</th>
              <th scope="col">Era</th>
              <th scope="col">Watched by</th>
              <th scope="col" class="num">
                Reconnects
              </th>
              <th scope="col">Last error</th>
            </tr>
          </thead>
          <tbody>
            {(data?.backends ?? []).map((b) => (
              <tr key={b.id}>
                <td>{b.id}</td>
                <td>
                  <span class={`state ${b.state}`}>{b.state}</span>
                </td>
                <td>{b.era ?? "—"}</td>
                <td class="mono">
                  {b.watcher ?? <span class="muted">nobody</span>}
                  {b.watching && <span class="tag">this instance</span>}
                </td>
                <td class="num">{b.reconnects}</td>
                <td class="failure">{b.lastFailure ?? <span class="muted">none</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

const KINDS = { tools: "Tools", prompts: "Prompts", resources: "Resources", resourceTemplates: "Templates", held: "Held tools" } as const;
type Kind = keyof typeof KINDS;

function CatalogView({ bump }: { bump: number }) {
  const { data, error } = usePoll<Catalog>("api/catalog", 10_000, bump);
  const [kind, setKind] = useState<Kind>("tools");
  const [query, setQuery] = useState("");
  const [backend, setBackend] = useState("");
  const [mime, setMime] = useState("");
  const rows = useMemo(() => {
    if (data === undefined) return [];
    if (kind === "held") return data.held.map((h) => ({ name: h.exposedName, backend: h.backendId, description: `${h.pinned ? "pinned" : "held"} · ${h.hash}`, mimeType: undefined }));
    return data[kind].map((item) => ({
      name: [item.name, item.uri, item.uriTemplate].find((v): v is string => typeof v === "string") ?? "",
      backend: item.backend,
      description: typeof item.description === "string" ? item.description : typeof item.uri === "string" && item.uri !== item.name ? item.uri : typeof item.uriTemplate === "string" ? item.uriTemplate : "",
      mimeType: typeof item.mimeType === "string" ? item.mimeType : undefined,
    }));
  }, [data, kind]);
  const mimeTypes = distinct(rows.map((r) => r.mimeType));
  const shown = rows.filter((r) => (backend === "" || r.backend === backend) && (mime === "" || r.mimeType === mime) && matches(query, r.name, r.description));
  return (
    <section aria-label="Catalog">
      <div class="filters">
        <div class="segmented" role="group" aria-label="List">
          {(Object.keys(KINDS) as Kind[]).map((k) => (
            <button
              key={k}
              type="button"
              aria-pressed={kind === k}
              onClick={() => {
                setKind(k);
                setMime("");
                setBackend("");
              }}
            >
              {KINDS[k]} {data !== undefined && <span class="muted">{k === "held" ? data.held.length : data[k].length}</span>}
            </button>
          ))}
        </div>
        <Search label="Search" value={query} onInput={setQuery} />
        <Choice label="Server" value={backend} options={distinct(rows.map((r) => r.backend))} onChange={setBackend} />
        {mimeTypes.length > 0 && <Choice label="MIME type" value={mime} options={mimeTypes} onChange={setMime} />}
      </div>
      <Problem error={error} />
      <p class="count">
        {shown.length} of {rows.length}
      </p>
      <div class="table">
        <table>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Server</th>
              {mimeTypes.length > 0 && (
                <th scope="col" class="wide">
                  MIME type
                </th>
              )}
              <th scope="col">Description</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((r, i) => (
              <tr key={`${r.backend} ${r.name} ${i}`}>
                <td class="mono">{r.name}</td>
                <td>{r.backend}</td>
                {mimeTypes.length > 0 && <td class="wide">{r.mimeType ?? "—"}</td>}
                <td>{r.description}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function DiffText({ diff }: { diff: Diff }) {
  const parts: [string, string[]][] = [
    ["+", diff.added],
    ["−", diff.removed],
    ["~", diff.changed],
  ];
  return (
    <span class="diff">
      {parts
        .filter(([, names]) => names.length > 0)
        .map(([sign, names]) => (
          <span key={sign} class={`d${sign === "+" ? "add" : sign === "~" ? "chg" : "rem"}`}>
            {sign} {names.join(", ")}
          </span>
        ))}
    </span>
  );
}

function FeedView({ entries, connected }: { entries: FeedEntry[]; connected: boolean }) {
  const [query, setQuery] = useState("");
  const shown = entries.filter((e) => e.type !== "update" || matches(query, e.uri, e.backend));
  return (
    <section aria-label="Live feed">
      <div class="filters">
        <Search label="Filter updates" value={query} onInput={setQuery} />
        <p class={connected ? "live on" : "live"}>{connected ? "live" : "reconnecting…"}</p>
      </div>
      {shown.length === 0 && <p class="muted">Nothing yet: updates and list changes appear here as they happen, cluster-wide.</p>}
      <div role="log" aria-label="Updates and list changes, newest first">
      <ol class="feed">
        {shown.map((e) => (
          <li key={e.id} class={e.type}>
            <Time at={e.at} />{" "}
            {e.type === "update" && (
              <>
                <span class="kind">updated</span> <span class="mono">{e.uri}</span> <span class="muted">({e.backend})</span>
              </>
            )}
            {e.type === "dropped" && (
              <>
                <span class="kind">+{e.count} more updates</span> <span class="muted">not shown (from {e.instance})</span>
              </>
            )}
            {e.type === "list_changed" && (
              <>
                <span class="kind">{e.list} list changed</span>{" "}
                {Object.entries(e.changes).map(([kind, diff]) => (
                  <span key={kind}>
                    <span class="muted">{kind}:</span> <DiffText diff={diff} />{" "}
                  </span>
                ))}
              </>
            )}
          </li>
        ))}
      </ol>
      </div>
    </section>
  );
}

function App() {
  const [tab, setTab] = useState<Tab>(() => {
    const fromHash = location.hash.slice(1) as Tab;
    return TABS.includes(fromHash) ? fromHash : "resources";
  });
  const feed = useFeed();
  const tabs = useRef<(HTMLButtonElement | null)[]>([]);
  useEffect(() => {
    history.replaceState(null, "", `#${tab}`);
  }, [tab]);
  useEffect(() => {
    // "/" goes to the view's search field.
    const onKey = (e: KeyboardEvent): void => {
      if (e.key !== "/" || (e.target instanceof HTMLElement && ["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName))) return;
      const search = document.querySelector<HTMLInputElement>("main [data-search]");
      if (search === null) return;
      e.preventDefault();
      search.focus();
    };
    addEventListener("keydown", onKey);
    return () => removeEventListener("keydown", onKey);
  }, []);
  const onTabKey = (e: KeyboardEvent, i: number): void => {
    const step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    const to = e.key === "Home" ? 0 : e.key === "End" ? TABS.length - 1 : step === 0 ? -1 : (i + step + TABS.length) % TABS.length;
    if (to < 0) return;
    e.preventDefault();
    setTab(TABS[to]!);
    tabs.current[to]?.focus();
  };
  return (
    <>
      <header>
        <h1>mcp-broker console</h1>
        <p class="muted">
          {feed.instance !== undefined && (
            <>
              instance <span class="mono">{feed.instance}</span> ·{" "}
            </>
          )}
          <span class={feed.connected ? "live on" : "live"}>{feed.connected ? "live" : "connecting…"}</span>
        </p>
        <nav role="tablist" aria-label="Views">
          {TABS.map((t, i) => (
            <button
              key={t}
              type="button"
              role="tab"
              id={`tab-${t}`}
              aria-selected={tab === t}
              aria-controls="view"
              tabIndex={tab === t ? 0 : -1}
              ref={(el) => {
                tabs.current[i] = el;
              }}
              onClick={() => setTab(t)}
              onKeyDown={(e) => onTabKey(e, i)}
            >
              {TAB_TITLES[t]}
              {t === "feed" && feed.entries.length > 0 && (
                <span class="badge" aria-hidden="true">
                  {feed.entries.length >= FEED_MAX ? `${FEED_MAX}+` : feed.entries.length}
                </span>
              )}
            </button>
          ))}
        </nav>
      </header>
      <main>
        <div id="view" role="tabpanel" aria-labelledby={`tab-${tab}`}>
        {tab === "resources" && <ResourcesView bump={feed.bump} />}
        {tab === "sessions" && <SessionsView />}
        {tab === "backends" && <BackendsView />}
        {tab === "catalog" && <CatalogView bump={feed.listBump} />}
        {tab === "feed" && <FeedView entries={feed.entries} connected={feed.connected} />}
        </div>
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);

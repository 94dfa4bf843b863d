/**
 * Why the broker falls short where it does, from profiling this version (step profiles of
 * `npm run bench -- --cpu-prof`, heap snapshots of `--heap-snapshot`; see README, Profiling).
 * Appended to a scenario's findings when one of its targets is missed, the `<id>:redis` entry when
 * a Redis-engine target is, so the results say why and not only by how much. Re-check with a profiled run after broker changes: a run's own
 * profile tables (under --cpu-prof) are authoritative, this text is the last analysis.
 */
export const KNOWN_CAUSES: Record<string, string[]> = {
  unicast: [
    "Why (step profile at 10k/s: the broker is ~80 % idle): what remains per update is one `writev` per delivery (as for the raw server), " +
      "the SDK's stdio transport parsing each line with its JSON-RPC zod schema (~1–2 % of the time; `resources/updated` then skips the SDK's dispatch, upstream/backend-connection.ts `fastPathUpdates`), " +
      "and the in-process bus hop. " +
      "Where the p99 comes from (memory engine at 5k/s, broker run with --trace-gc-nvp, 2026-11-27): a young-generation GC every ~300 ms that pauses ~3.4 ms; about 1 % of the updates arrive during one, so the p99 is that pause. " +
      "Each pause copies and promotes ~1.3 MB: ~800 B per update delivered since the last one is still alive (the resume history's URIs are ~15 % of it: 1.12 MB with server.resumeHistory 0), and more of it with a longer interval, so allocating less does not shorten the tail: " +
      "one microtask and no promise per update on the memory bus cut what an update allocates by a fifth (GC every ~390 ms instead of ~310 ms) but each pause got longer (3.9 ms) and the p99 stayed (5.2–7.4 ms): not shipped. " +
      "A 4 MB young generation (node --max-semi-space-size=4, 16 MB by default) made the pauses ~1.7 ms and the p99 1.8 ms (raw 2.7 ms), but cost the bursts: in the same session the memory broadcast's p99 went from 0.98x to 1.67x raw (broker CPU 39 → 56 %) and the memory hot URI from 391k to 295k deliveries/s; 8 MB gave a p99 of 2.3 ms. Not shipped. " +
      "Late on 2026-11-27 (step profile at 20k/s): the update log built each update's bus message as `{ ...update, key, keys, position }`, and V8 (Node 20) adds properties to a spread's copy on its slow path: ~2.5 µs a message against ~0.1 µs built field by field (micro-benchmark), ~9 % of the broker's CPU at 20k/s (shared/src/engine/bus.ts `resourceUpdatedMessage`). " +
      "Two runs of each build taking turns at 20k/s: broker CPU 65 and 62 → 52 and 52 %, p99 24.2 and 24.4 → 3.9 and 4.0 ms (raw 16.2 and 9.8 → 9.4 and 9.9 ms). " +
      "A missed target here is machine noise first: compare the CPU columns, and rerun.",
  ],
  "unicast:redis": [
    "Why (Redis engine; step profiles, GC traces and event-loop lag of the watcher): the update crosses two process hops more than on the raw path: the backend's HTTP event stream to the broker that watches it, " +
      "and that broker's publish through Redis to the broker holding the session (the watcher's own sessions too: they get each update back from Redis, so every session sees the cluster's order). " +
      "Slow updates come in bursts that hit the sessions of both brokers alike, so they start in the watcher, the busiest process on the path (~30 % of a core at 5k/s): " +
      "over a third of its busy time is the kernel's `writev` (its own sessions' SSE writes, and one corked write of each tick's publishes to Redis), about a sixth the HTTP intake (the backend's event stream and the update filter; undici's fetch until the backend connection got its own node:http fetch, see the subscribe scenario), " +
      "and when it stalls (a GC pause, or waiting for a core) the updates queue in the backend's stream and drain at its per-update cost. " +
      "Fixed so far: publishes as plain corked commands instead of ioredis pipelines (~1.6 MB surviving each young-generation GC, 3-8 ms pauses; shared/src/engine/redis/redis-bus.ts); " +
      "the update log's publish script (the stamps and the publish of one tick's updates) auto-pipelined by ioredis, so each batch waited for the previous batch's replies and went out only in the event loop's check phase, and its pipeline objects survived young-generation GCs (1.8 → 0.6 MB promoted per scavenge on the watcher at 5k/s; same-session A/B p99 4.64/4.45 → 4.13/3.73 ms; shared/src/engine/redis/redis-update-log.ts `UPDATE_PUBLISH_COMMAND`); " +
      "the watcher's own publishes, which Redis hands back, dropped before decoding; and the resume history keeping URIs instead of whole notifications, which V8 promoted to its old space and collected in full GCs of up to 17 ms every ~7 s (session/legacy-session.ts `remember`). " +
      "Timed per hop inside the brokers at 5k/s (URI emit stamp → watcher intake → publish acknowledged → bus message on each broker): p50 0.09 / 0.26 / 0.30 ms, p99 1.4–2.5 / 3.0–4.6 / 3.1–4.7 ms. " +
      "The intake's tail is the watcher's young-generation GC (a 2 ms scavenge every ~180 ms) and waiting for a core; the Redis round trip doubles it. Smaller young generations (--max-semi-space-size=4) shortened the pauses and helped the single Redis in some runs but not the Redis Cluster: not shipped. " +
      "On a Redis Cluster every key and channel of a deployment is in one slot (keys.ts), so one master and its replica carry all of its updates, while the raw baseline's per-URI channels spread over the three masters. " +
      "Until late on 2026-11-27 each member's subscriber connection also refreshed the cluster's slot table every second: a new connection to a node, CLUSTER SLOTS, and a rebuild of the 16 384-slot table (~1.5 ms of the member's CPU each time). " +
      "In a probe of the update log and the bus alone (one process, ~4.5k updates/s, the test cluster), the publish's p99 went 1.8–2.0 → 1.0–1.3 ms without it, against 0.55–0.7 ms on one Redis; " +
      "in the bench's unicast step at 5k/s, two runs of each build taking turns gave 10.9 and 9.0 ms before and 10.3 and 4.6 ms after (raw 2.5–3.9 ms): within this machine's noise. A slot that moves is now followed on the old master's SUNSUBSCRIBE, or by the MOVED answer to a command each member sends on the slot once a second (engine/redis/redis-bus.ts). " +
      "Late on 2026-11-27 (watcher step profile at 20k/s): building each update's message head from a spread with added keys (see the memory engine's entry) was ~12 % of the watcher's busy time, ~4 % since. " +
      "What stays: each tick's script is one write to Redis, and a write on this machine's loopback costs ~30 µs of the kernel whatever its size (a probe: 50 B to 16 KB, 27–32 µs; 64 KB, 46 µs); at 20k/s a script carried ~14 updates (Redis INFO commandstats: 14 343 scripts for ~200 000 updates), and those writes were ~11 % of the watcher's profile. " +
      "On this 2-core machine six processes (backend, two brokers, Redis, two load generators) share the cores, and the p99 of both paths moves by 2× between runs: compare the CPU columns, and rerun.",
  ],
  "hot-uri": [
    "Why: each delivery is one socket write of an HTTP chunk encoded once for all streams (event id included; the raw server makes a `res.write` of a shared frame, which Node sends as four writes); the broker adds a history entry per session " +
      "(session/legacy-session.ts `remember`) and the interest-table lookup. The rest is the socket writes both sides pay.",
  ],
  broadcast: [
    "Why: the fan-out loop (session/session-host.ts `onBusMessage` → `deliver` per sink) writes one shared chunk per stream, like the raw server its shared frame; " +
      "the broker adds a history entry per session. Both loops run to the end before the event loop turns, so p99 ≈ the loop's length, and a GC in the loop.",
  ],
  scale: [
    "Why (GC traces of both servers, 19 000 streams): the broadcast's tail is V8's old-space collections. Node's `res.write` on a chunked response is four socket writes (size line, CRLF, the frame, CRLF), " +
      "and what they leave until the loop ends (the corked writes, their callbacks) outlived the young-generation GCs inside the loop: ~0.4 KB per stream went to the old space per broadcast, on both servers, " +
      "and a mark-compact followed every few broadcasts, its incremental steps (up to 26 ms each, ~125 ms in all) landing in a broadcast's loop; the broker's heap is twice the raw server's (its sessions), so its marking took longer. " +
      "Late on 2026-11-27 a legacy notification is encoded once as a whole HTTP chunk and written to each chunked response's socket in one write (http/sse-stream.ts `write`; a probe of 9 000 plain SSE responses: " +
      "~110 → ~85 ms per broadcast and 3.8 → 0 MB to the old space), and one `nextTick` uncorks the streams written in a tick, each 4 096 at most, instead of one per response. " +
      "Scenario 10 alone, old and new build taking turns (one run each): broker p50/p99 296/552 → 232/325 ms against raw 259/397 and 248/499 ms.",
  ],
  memory: [
    "Why (heap snapshot diff, 10 000 sessions minus none): ~9.6 KB of live heap per legacy session and ~11.4 KB per modern listen stream vs ~4.8 KB for a raw SSE connection. " +
      "A listen stream is an open POST, so Node keeps its request objects (IncomingMessage with its parsed headers, the parser's bound callbacks) as long as the stream lives; " +
      "each session or stream also owns an XState actor (≈ 1.9 KB: snapshot, actor scope, mailbox, bound `send`; its actor system is shared), its sink and stream objects, " +
      "and its entries in the registry and interest table. " +
      "RSS is above the live heap: each connection holds native memory (socket, HTTP parser) as the raw server's do, and the old-space pages the handshakes fragmented stay committed until V8's memory reducer compacts them in the idle process. " +
      "Until 2026-11-27 the settled sample forced GCs that postponed the reducer, so it measured the fragmented heap (≈ 16 KB committed per legacy session for ≈ 10 KB live at 10 000, RSS ≈ 2× heap); it now waits for the reducer (see the samples' reducer column; a sample it skipped keeps the fragmented heap). " +
      "A young generation still grown by the opening burst (see the samples' young generation column: V8 returns it only at a GC after ≥ 5 s of low allocation) would weigh up to 31 KB per session at 1 000 sessions. " +
      "Between runs the RSS per session at 10 000 moves by ±2 KB, so figures near 30 KB can land on either side. " +
      "Node keeps each response's header block as the string it concatenated it from, a tree of some thirty pieces per open stream: since 2026-11-27 it is read once after sending, which flattens it (heap snapshot of 10 000 legacy sessions: 287 738 concatenated strings gone, heap 10.0 → 9.39 KB per session; RSS did not move beyond the noise).",
  ],
  subscribe: [
    "Why (step profiles): in the later-subscriber phase about a fifth of the broker's busy time is the kernel's `writev` of the answers (the raw server pays it too), " +
      "and the rest the HTTP request, the session actor's two events per operation (`subscription.add`, then `subscribe.done` from the host that ran it), the registry and the interest table. " +
      "The first subscriber also waits for the backend's answer to the upstream subscribe (a stdio round trip to the bench backend's SDK server, on the same two cores). " +
      "Since 2026-11-27 its baseline makes that round trip too (the plain server relays each request to a bench backend of its own: same transport, no SDK); the stdio relay runs at about the {} floor's rate, so on the memory engine the gap is the broker's own work around the upstream request. " +
      "A listen's fixed cost is its actor (created, started; the subscribe and the release are the host's effects since 2026-11-27, an invoked promise actor each before) and the modern request's checks; per URI, its reservation, upstream check and interest. " +
      "On 2026-11-27 (step profiles, CPU for the same requests, same session): the SDK's spec-method request overload found each request's result schema by validating `undefined` against it, a failed parse and its error message per upstream request (~6 % of the broker's CPU in the first-subscriber phase; the empty-result requests now name the schema, member upstream/backend-connection.ts); " +
      "each request made an AbortSignal it rarely needed (~2.5 %; now made when read); each upstream request was its own pipe write to the stdio backend (~9 %; one corked write per event-loop turn now, upstream/stdio-read-buffer.ts `batchStdioWrites`); " +
      "a listen validated every URI twice and sent its interest through the actor one event per URI (now once, and one event for all). " +
      "Broker CPU under the profiler, before → after: first subscriber 3.30 → 2.58 s for 8 000, later subscriber 2.00 → 1.64 s, listen ×100 3.50 → 3.02 s for 1 280 (Redis, per broker: 4.97/4.37 → 4.08/3.68 s). " +
      "Throughput moved less than that between runs on this machine (the {} floor itself ranged 5.8k–10.7k/s across today's runs): compare the ratios of one run. " +
      "Later on 2026-11-27 (listen ×10 step profile, memory engine, ~1.1 ms of broker CPU per listen): closing a listen aborted an AbortController, whose `abort()` makes a DOMException with its stack (~4 %; a plain flag now), and each listen hashed its principal for its cursor prefix (~2 %; kept per principal now): 1.47 → 1.39 s for 1 280. " +
      "What remains of a listen's fixed cost: its actor's creation and first transitions (~15 %), the SDK's era classification of a modern request (~7 %: its response checks fail first, then the envelope is validated), the SSE stream's headers and acknowledgement, and the connection itself (the raw baseline pays that too). " +
      "On 2026-11-26 the session actor's operations became transitions without a target on one state (they were states of a parallel region with eventless transitions between them), " +
      "a request stopped sending the actor an event to restart the idle timer (the host re-arms it for what is left), and the catalog keeps resolved URIs (a listen of 100 URIs spent a quarter of its CPU matching templates): " +
      "33 → 22 µs of CPU per subscribe or unsubscribe in a micro-benchmark of the host; later subscriber 10.3k → 15.8k/s and listen ×100 630 → 852/s in the same session. " +
      "Until this version each subscribe also ran an XState child actor for the flow and one per step (validate, reserve, ensure): 255 µs of CPU per subscribe in a micro-benchmark, 50 µs without them; " +
      "before that, copying the session's subscription set on every operation took 60 % at 250 subscriptions per session. " +
      "Later on 2026-11-27: the SDK's era classifier (`classifyInboundRequest`) tries the response schemas before the request's, and each failed zod parse builds its issues and an error (~5 % of the broker's CPU in these phases); " +
      "a plain legacy request (a JSON-RPC request by the SDK's own check, no result or error, no envelope claim, no modern header) now skips it (http/plain-legacy-request.ts). " +
      "Broker CPU under the profiler, same session: later subscriber 916 → 742 ms for 8 000, unsubscribe 1 064 → 837 ms, first subscriber 1 871 → 1 747 ms; listens are modern requests and still take the classifier. " +
      "Late on 2026-11-27 (listen ×100 step profile, memory engine): the registry awaited each ref of a listen's batch and built the session's key again for each: its adds and releases were 17 % of the broker's CPU in that phase, 10 % as one loop (engine/memory/memory-registry.ts `eachRef`; 118 → 65 µs per listen of 100 held URIs in a micro-benchmark), " +
      "and the interest table now hands a later sink the SUBSCRIBE made for the first instead of asking the bus again. Two runs of each build taking turns: listen ×100 806 and 678 → 973 and 950/s, listen ×10 1 127 and 909 → 1 264 and 1 158/s. " +
      "Per URI a listen still resolves it in the catalog, reserves it, checks its upstream watch and adds its interest, each a lookup of a string made for that request (about 1 µs each), where the raw server adds it to one set. " +
      "Later still (sampled allocation profiles of each phase, memory engine, `HeapProfiler.startSampling` with collected objects included): a later subscribe allocated 42.6 KB, a listen of 100 held URIs 490 KB, a third of it XState's (its snapshots, Sets of state nodes, `assign`'s new context). " +
      "The session actor's queue now changes in place instead of an `assign` per event, its `closed` check compares the state value instead of `snapshot.matches` (~1.3 KB a call, two calls per subscribe), a member that watches a backend itself ensures its upstream without the holder lookup's async loop, and a listen's held URI whose upstream is watched completes without an async step (member upstream/upstream-subscriptions.ts `watching`): " +
      "later subscriber 42.6 → 35.6 KB, listen ×100 490 → 309 KB per operation. Throughput did not move beyond this machine's noise in two runs of each build taking turns (the young-generation GCs are ~5–8 % of these phases' CPU). " +
      "On 2026-11-27, evening (step profiles of each phase, memory engine, the time of each function before → after): the Host check parsed the same header as a URL for every request, and the Accept check split the same header (107 → 10 ms for 8 000 first subscribers, 48 → 3 ms for later ones; the values that passed are remembered, at most 64); " +
      "a subscribe's ref got the session's epoch as a spread with the key added (`{ ...ref, epoch }`), a slow path of V8 on Node 20 (~2 µs against ~0.1 µs for a spread that adds no key; `fenced` was ~2 % of the later-subscriber phase); the flow now builds the ref with its epoch; " +
      "a URI not seen before (each first subscriber's) was resolved with the full RFC 6570 matcher against the backend's template, ~5 % of that phase; a template that is a literal then one plain `{x}` or `{+x}` is now answered from its rules (naming/uri-template.ts `matches`, 3 → 0.2 µs in a micro-benchmark, checked against the matcher over 45 000 generated URIs); " +
      "a listen's honored URIs were copied into a null-prototype object key by key and read back with Object.keys and Object.values (~3 % of a listen ×100); they stay the list the subscribe returned. " +
      "What stays in the first-subscriber phase, per operation beyond a later subscriber's (profile, µs under the profiler): the pipe write of the upstream request (~27), the backend's answer read and decoded by the SDK (~34), the SDK client's request path (~24), and the session actor's extra events. " +
      "These costs are spread: none of what is left is more than a few per cent of a phase, and XState's own code (8–20 % of a phase's busy time, its self time in these profiles) runs the design's per-session actors. " +
      "On this machine the ≥ 0.8× targets of the first subscriber and the listens need the broker's CPU per operation within ~1.25× of the raw server's, which only answers, relays or opens a stream; they are missed.",
  ],
  "subscribe:redis": [
    "Why (Redis engine; step profiles of both brokers): the backend is behind Streamable HTTP here (stdio on the memory engine), and every first subscribe and last release is an HTTP request from the watcher to it, " +
      "which the watcher alone makes for the cluster; that broker is the busiest process of these phases. Its profile was 100 % busy in the first-subscriber phase (~4 ms of CPU per upstream subscribe under the profiler), " +
      "over 40 % of it in the platform fetch: undici's fetch algorithm, the web streams it builds per request (request body, its tee for a clone, response body; `makeTransferable`), " +
      "and `getEventListeners` scanning the abort listeners it leaves on the transport's long-lived signal until GC (thousands, with MaxListenersExceededWarning). " +
      "The backend connection now has its own fetch on node:http (upstream/backend-http.ts): one web stream per response, listeners removed when a response ends, and the update filter and the call ties of a backend's requests in one pass: " +
      "1 192 → 680 µs of client CPU per request against the demo backend (SDK client, 8 000 pings, 32 at a time). " +
      "The SDK's own SSE parsing of each answer (a text decoder and an SSE parser, web TransformStreams) was then about a quarter of the watcher's profile; an answer that holds only the JSON-RPC response now reaches the SDK as JSON (upstream/backend-http.ts `probeAnswer`): same session, first subscriber 1 319/1 327 → 1 442/1 466/s. " +
      "What remains on the watcher (profile, first-subscriber phase, ~92 % busy): socket writes and reads, ioredis (the registry scripts, auto-pipelined), undici's Response and Headers objects the SDK's fetch contract asks for, and its schema validation. " +
      "The last-unsubscribe phase released 8 000 resources at once when their grace periods ended together: the watcher stalled past its lease TTL, lost the lease, and the other broker re-subscribed everything (14 795 upstream calls for 8 000); " +
      "releases now run 64 at a time per backend (as do the unsubscribes of a member that stops watching), and a reconcile re-checks the counts of what looks missing before subscribing it again. " +
      "A subscribe on a non-watcher broker asked the watcher over the bus (a request and its reply) even when the resource was held upstream already; since 2026-11-26 the watcher marks what it watches in Redis (`watching:<backend>`), " +
      "the registry's add script tells a subscribe that is not the first when it finds the mark, and the watcher's release check removes the mark in the same step as it finds nobody subscribed. " +
      "A listen reserves all its URIs in one registry script, and an ended session or stream releases everything it held in one (they were one script per URI: ioredis's command path was about half of the brokers' CPU in the listen ×100 phase); " +
      "a session's last-seen time is written at most once a second (it was a Redis command per request). Same session: later subscriber 7.0k → 8.4k/s, listen ×100 221 → 539/s (169/s before all of these). " +
      "Concurrent registry scripts go to Redis in one pipeline per event-loop turn (ioredis auto-pipelining on the commands connection). " +
      "On 2026-11-27 (watcher profile, 8 000 first subscribers, same session, the two changes together): undici's `Response` wrapped each answer read before it was handed over in a web stream that the SDK's `json()` read back (extractBody, `makeTransferable`, the stream's pull); " +
      "such an answer is now a `Response` whose `text()` and `json()` return the text (upstream/backend-http.ts `TextResponse`), and the watch's check that somebody still wants what it just watched rides on the mark's script (one Redis command fewer per first subscribe): busy 12.9 → 12.5 s, undici and web streams 1 s less self time. " +
      "Later that day: each channel an interest table let go of after its grace period was an UNSUBSCRIBE of its own, one loopback socket write each (~150–200 ms of each broker's CPU in the last-unsubscribe phase); " +
      "the bus now gathers them for 50 ms into one command (engine/redis/redis-bus.ts `unsubscribe`): ~30 ms. " +
      "Late on 2026-11-27 (listen ×100 step profiles): a batch's refs went to the registry's scripts as three arguments each (~300 for a listen of 100), and ioredis builds a command as a string, five pieces an argument; " +
      "they are now one JSON argument (engine/redis/redis-registry.ts `batch`; 80 → 20 µs per batch of 100 in a micro-benchmark): each broker's busy time in that phase, one profiled run each, 3.5/3.3 → 2.4/2.4 s, ioredis's own time 457/440 → 240/301 ms (with the interest-table change of the memory engine's entry). " +
      "What stays is the socket: the largest single item of both brokers' profiles in that phase is `writeUtf8String` (7–10 %), the loopback write of each pipeline of commands to Redis, one per event-loop turn that has any; the raw baseline makes none. " +
      "On 2026-11-27, evening: the batch scripts answered two or three numbers per ref (a listen of 100: 300 numbers to add, 200 to remove), each decoded by ioredis as an item of its own; they answer one string now, a character per ref (engine/redis/redis-registry.ts `ADDED`): " +
      "listen ×100 step profiles, both brokers, one profiled run each: ioredis self time 1 246 → 665 ms, busy 8.9 → 8.0 s for 1 280 listens. " +
      "All of the evening's changes together (see the memory engine's entry), two profiled runs of each build taking turns, the two brokers' busy time per phase: later subscriber 7.06/6.80 → 5.48/6.20 s for 8 000, unsubscribe not last 6.83/6.97 → 6.62/6.13 s, listen ×10 6.29/7.10 → 5.50/5.68 s and listen ×100 9.55/8.68 → 7.95/8.50 s for 1 280, first subscriber 38.6/32.4 → 32.1/32.0 s; " +
      "ops/s in the same runs: later subscriber 2 276/2 369 → 2 946/2 602, listen ×10 410/375 → 472/466, listen ×100 277/298 → 326/308 (the machine ran at about half the speed of the committed runs: its raw JSON-RPC floor was 5.4–6.4k/s). " +
      "The watcher's profile in the last-unsubscribe phase (~95 % busy): the SDK's HTTP client transport sending each upstream unsubscribe (~25 %: two zod parses of each outgoing message, undici's Headers), the clients' own unsubscribes, ioredis (a release check and a stamp deletion per URI), and GC (~10 %).",
  ],
};

/**
 * Why the broker falls short where it does, from profiling this version (step profiles of
 * `npm run bench -- --cpu-prof`, heap snapshots of `--heap-snapshot`; see README, Profiling).
 * Appended to a scenario's findings when one of its targets is missed, so the results say why
 * and not only by how much. Re-check with a profiled run after broker changes: a run's own
 * profile tables (under --cpu-prof) are authoritative, this text is the last analysis.
 */
export const KNOWN_CAUSES: Record<string, string[]> = {
  unicast: [
    "Why (profile of one update at 5k–20k/s, ~50 µs of broker CPU vs ~20 µs for the whole raw server): " +
      "~35–40 % flushing the write (the nextTick uncork → writev per delivery, http/sse-stream.ts `write`: cork, an `id:` string and the body as two chunked writes, a closure per write); " +
      "~20–28 % GC; ~12–17 % zod in the SDK client's inbound path (StdioClientTransport `deserializeMessage` parses every line with the JSONRPCMessage union, then Protocol's `onmessage` runs four more `safeParse` type guards, three of which fail and build issue objects) plus ~6–12 % the rest of that path (Client response-cache `evictKey` on every resources/updated, notification dispatch through a Promise); " +
      "~5–9 % the fan-out itself. A stdio chunk of ~400 updates is processed in one macrotask before any write is flushed, so p99 grows with the batch once the broker passes ~50 % CPU.",
  ],
  "hot-uri": [
    "Why: 80 %+ of the broker's time is the per-delivery write flush (writev per socket, inherent, the raw server pays it too) — the broker adds per delivery a `res.cork()`, an `id: N` string, two chunked writes and a `process.nextTick` closure, plus a history entry (session/legacy-session.ts `deliver`). " +
      "A micro-benchmark of that write pattern on this machine (1 000 SSE streams × 200 frames): 7.7–7.9 µs per delivery for one `res.write(frame)` vs 8.9–9.5 µs for the broker's cork/2 writes/nextTick-uncork (+15–20 %).",
  ],
  broadcast: [
    "Why: the fan-out loop (session/session-host.ts `onBusMessage` → `deliver` for every sink) runs for all 10 000 sessions before the first byte leaves, because every stream uncorks on nextTick; each delivery also builds its own `id:` line and closure. The writes themselves cost what they cost the raw server.",
  ],
  memory: [
    "Why (heap snapshot diff, 10 000 legacy sessions minus none): 13.6 KB of heap per session vs 4.7 KB for a raw SSE connection. " +
      "Beyond the Node HTTP objects both have, each legacy session owns an XState actor with its own actor system (≈ 25 closures, 16 bound functions, 5 Maps and 8 Sets per session; a bare `createActor(legacySessionMachine)` measures ≈ 5 KB heap), a LegacySession, an SseStream and its own keep-alive Timeout. " +
      "RSS grows ≈ 2.5× the live heap because the handshakes (4 requests per legacy session, each validated with zod) leave V8 with a larger committed heap.",
  ],
  subscribe: [
    "Why (~1 ms of broker CPU per subscribe): every subscribe spawns an XState subscription-flow machine with 3–4 promise actors (session/subscription-flow.ts), and session/legacy-session-machine.ts copies the whole subscriptions object (`{ ...context.subscriptions, [op.uri]: output.target }`) on every subscribe, O(n) per call and O(n²) for a session subscribing n URIs.",
  ],
};

/**
 * Why the broker falls short where it does, from profiling this version (step profiles of
 * `npm run bench -- --cpu-prof`, heap snapshots of `--heap-snapshot`; see README, Profiling).
 * Appended to a scenario's findings when one of its targets is missed, so the results say why
 * and not only by how much. Re-check with a profiled run after broker changes: a run's own
 * profile tables (under --cpu-prof) are authoritative, this text is the last analysis.
 */
export const KNOWN_CAUSES: Record<string, string[]> = {
  unicast: [
    "Why (step profile at 10k/s: the broker is ~80 % idle): what remains per update is one `writev` per delivery (as for the raw server), " +
      "the SDK's stdio transport parsing each line with its JSON-RPC zod schema (~1–2 % of the time; `resources/updated` then skips the SDK's dispatch, upstream/backend-connection.ts `fastPathUpdates`), " +
      "and the in-process bus hop. A missed target here is machine noise first: compare the CPU columns, and rerun.",
  ],
  "hot-uri": [
    "Why: each delivery is one `res.write` of a frame encoded once for all streams (event id included), as in the raw server; the broker adds a history entry per session " +
      "(session/legacy-session.ts `remember`) and the interest-table lookup. The rest is the socket writes both sides pay.",
  ],
  broadcast: [
    "Why: the fan-out loop (session/session-host.ts `onBusMessage` → `deliver` per sink) writes one shared frame per stream, like the raw server; " +
      "the broker adds a history entry per session. Both loops run to the end before the event loop turns, so p99 ≈ the loop's length.",
  ],
  memory: [
    "Why (heap snapshot diff, 10 000 sessions minus none): ~9.5 KB of heap per legacy session and ~11 KB per modern listen stream vs ~4.8 KB for a raw SSE connection. " +
      "Beyond the Node HTTP objects both have, each session owns an XState actor (≈ 2.5 KB, its actor system shared with every other session's), the session or sink object, its stream, " +
      "and its entries in the registry and interest table (a subscription each here). " +
      "RSS is ≈ 3× the live heap because the handshakes (4 requests per legacy session, each validated with zod) leave V8 with a larger committed heap; " +
      "between runs the RSS per session moves by ±2 KB, so figures near 30 KB can land on either side.",
  ],
  subscribe: [
    "Why (~1 ms of broker CPU per subscribe): every subscribe runs an XState subscription-flow machine with 3–4 promise actors (session/subscription-flow.ts), " +
      "and session/legacy-session-machine.ts copies the session's subscriptions object on every subscribe (O(n) per call for a session holding n).",
  ],
};

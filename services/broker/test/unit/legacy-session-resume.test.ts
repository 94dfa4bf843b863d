import { describe, expect, it, vi } from "vitest";
import { createActor, fromPromise } from "xstate";
import { EventClock, formatEventId } from "../../src/fanout/event-ids.js";
import { PreparedNotification } from "../../src/fanout/prepared-notification.js";
import { LegacySession, type NotificationWriter, type SinceReport } from "../../src/session/legacy-session.js";
import { legacySessionMachine } from "../../src/session/legacy-session-machine.js";
import { ClientRequests } from "../../src/session/client-requests.js";

type Since = (position: number) => Promise<SinceReport>;
const cannotTell: Since = async () => {
  throw new Error("the cluster cannot tell");
};

/** A session whose subscribes always succeed; `since` stands for what the cluster can tell. */
function session(options: { historyLimit?: number; since?: Since; catchUp?: (clock: EventClock) => Promise<void> } = {}): { s: LegacySession; clock: EventClock } {
  const machine = legacySessionMachine.provide({ actors: { releaseAll: fromPromise(async (): Promise<void> => {}) } });
  const clock = new EventClock();
  const since = options.since ?? cannotTell;
  const actor = createActor(machine, { input: { id: "s", principal: "p" } });
  const s = new LegacySession("s", "p", actor, {
    events: clock,
    historyLimit: options.historyLimit ?? 64,
    questions: new ClientRequests("test"),
    since: (_targets, position) => since(position),
    // By default the cluster cannot say where its order stands: the clock stays.
    catchUp: () => options.catchUp?.(clock) ?? Promise.resolve(),
    exposeUri: (target) => target.uri,
    now: () => Date.now(),
    touched: () => undefined,
    logLevelSet: () => undefined,
    streamAttached: () => undefined,
  });
  actor.on("reply", ({ replyTo, error }) => s.settle(replyTo, error));
  // The host's part: every subscribe succeeds, every unsubscribe is done.
  actor.on("subscribe.run", ({ uri, replyTo }) => queueMicrotask(() => actor.send({ type: "subscribe.done", replyTo, output: { ok: true, target: { backendId: "b", uri }, added: true } })));
  actor.on("unsubscribe.run", ({ replyTo }) => queueMicrotask(() => actor.send({ type: "unsubscribe.done", replyTo })));
  actor.start();
  return { s, clock };
}

/** Like SseStream, it reports closed as soon as it is closed. */
function stream(): NotificationWriter & { events: { id: string; text: string }[] } {
  const events: { id: string; text: string }[] = [];
  let closed = false;
  return {
    events,
    get closed() {
      return closed;
    },
    write: (n) => events.push({ id: n.eventId, text: n.legacyFrame().toString("utf8") }),
    onClose: () => undefined,
    close: () => {
      closed = true;
    },
  };
}

const described = (events: { text: string }[]) =>
  events.map((e) => {
    const { method, params } = JSON.parse(e.text.split("data: ")[1] ?? "null") as { method: string; params: { uri?: string } };
    return params.uri ?? method;
  });
const everything = ["x://a", "x://b", "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"];

/**
 * A session subscribed to `uris`, resuming from `lastEventId` on a cluster that reports `report`;
 * its catch-up (to `position`) waits for `catchUp()`, which then awaits the attach.
 */
async function resumingBehindCatchUp(report: SinceReport, position: number, uris: string[], lastEventId: string) {
  let release: (() => void) | undefined;
  const { s, clock } = session({ since: async () => report, catchUp: (events) => new Promise((resolve) => (release = () => (events.caughtUp(position), resolve()))) });
  for (const uri of uris) await s.subscribe(uri);
  const resumed = stream();
  const attached = s.attachStream(resumed, lastEventId);
  await vi.waitFor(() => expect(release).toBeDefined());
  const catchUp = async (): Promise<void> => {
    release?.();
    await attached;
  };
  return { s, clock, resumed, catchUp };
}

describe("legacy session: event ids and resumption", () => {
  it("writes each event once, with an id line, and ids that increase: cluster positions, and position.n for its own", async () => {
    const { s, clock } = session();
    const first = stream();
    await s.attachStream(first, undefined);
    s.deliver(PreparedNotification.resourceUpdated("x://a", clock.cluster(7)));
    s.deliver(PreparedNotification.listChanged("tools", clock.next()));
    s.deliver(PreparedNotification.resourceUpdated("x://a", clock.cluster(9)));
    expect(first.events.map((e) => e.id)).toEqual(["7", "7.2", "9"]);
    expect(first.events[0]?.text).toMatch(/^id: 7\nevent: message\ndata: .*resources\/updated.*\n\n$/);
  });

  it("replays exactly what followed Last-Event-ID while its history covers it", async () => {
    const { s, clock } = session();
    const notes = [PreparedNotification.listChanged("tools", clock.cluster(3)), PreparedNotification.listChanged("prompts", clock.cluster(4)), PreparedNotification.resourceUpdated("x://a", clock.cluster(5))];
    for (const n of notes) s.deliver(n);
    const resumed = stream();
    await s.attachStream(resumed, notes[0]!.eventId);
    expect(resumed.events.map((e) => e.id)).toEqual(["4", "5"]);
  });

  it("asks the cluster when its history does not cover the id: what was updated since, merged with what arrived meanwhile, in order, then what nobody can tell", async () => {
    let report: (value: SinceReport) => void = () => undefined;
    const asked: number[] = [];
    const { s, clock } = session({
      since: (position) => {
        asked.push(position);
        return new Promise((resolve) => (report = resolve));
      },
    });
    await s.subscribe("x://a");
    await s.subscribe("x://b");
    await s.subscribe("x://c");
    const resumed = stream();
    const attached = s.attachStream(resumed, "40"); // from another instance: this session's history began later
    s.deliver(PreparedNotification.resourceUpdated("x://b", clock.cluster(60))); // live, while the cluster is asked
    expect(resumed.events).toEqual([]);
    report({
      updated: [{ target: { backendId: "b", uri: "x://a" }, position: 55 }, { target: { backendId: "b", uri: "x://b" }, position: 60 }],
      unknown: [{ backendId: "b", uri: "x://c" }],
      lists: [{ list: "tools", position: 50 }],
    });
    await attached;
    expect(asked).toEqual([40]);
    expect(resumed.events.map((e) => [e.id, described([e])[0]])).toEqual([
      ["50", "notifications/tools/list_changed"],
      ["55", "x://a"],
      ["60", "x://b"],
      [expect.stringMatching(/^60\.\d+$/), "x://c"],
    ]);
    s.deliver(PreparedNotification.resourceUpdated("x://a", clock.cluster(61)));
    expect(resumed.events.at(-1)?.id).toBe("61");
  });

  it("announces what nobody can tell once everything handed out before has arrived: an event still on its way goes first, and the announcement's id comes after it and before what follows", async () => {
    const { s, clock, resumed, catchUp } = await resumingBehindCatchUp({ updated: [], unknown: [{ backendId: "b", uri: "x://c" }], lists: [] }, 80, ["x://a", "x://c"], "40");
    // Handed out before the position the cluster reserved, still on its way here.
    s.deliver(PreparedNotification.resourceUpdated("x://a", clock.cluster(70)));
    expect(resumed.events).toEqual([]);
    await catchUp();
    s.deliver(PreparedNotification.resourceUpdated("x://a", clock.cluster(81)));
    expect(resumed.events.map((e) => [e.id, described([e])[0]])).toEqual([
      ["70", "x://a"],
      [expect.stringMatching(/^80\.\d+$/), "x://c"],
      ["81", "x://a"],
    ]);
  });

  it("tells nothing before everything handed out before has arrived, so a list change still on its way goes out in order, before the updates told after it", async () => {
    const { s, clock, resumed, catchUp } = await resumingBehindCatchUp({ updated: [{ target: { backendId: "b", uri: "x://a" }, position: 6 }], unknown: [], lists: [] }, 7, ["x://a"], "4");
    // Stored at 5 and read from Redis by nobody here yet: this broker's bus brings it now.
    s.deliver(PreparedNotification.listChanged("tools", clock.cluster(5)));
    expect(resumed.events).toEqual([]);
    await catchUp();
    expect(resumed.events.map((e) => [e.id, described([e])[0]])).toEqual([
      ["5", "notifications/tools/list_changed"],
      ["6", "x://a"],
    ]);
  });

  it("leaves out of a resumption what arrived live meanwhile at the same position or later: a told update or list change, or a resource nobody could tell about", async () => {
    let report: (value: SinceReport) => void = () => undefined;
    const { s, clock } = session({ since: () => new Promise((resolve) => (report = resolve)) });
    for (const uri of ["x://a", "x://b", "x://c", "x://d"]) await s.subscribe(uri);
    const resumed = stream();
    const attached = s.attachStream(resumed, "40");
    // Live while the cluster is asked: a list change and updates (a watcher's re-announcement, say).
    s.deliver(PreparedNotification.listChanged("tools", clock.cluster(56)));
    s.deliver(PreparedNotification.resourceUpdated("x://b", clock.cluster(58)));
    s.deliver(PreparedNotification.resourceUpdated("x://c", clock.cluster(59)));
    report({
      updated: [{ target: { backendId: "b", uri: "x://a" }, position: 55 }, { target: { backendId: "b", uri: "x://b" }, position: 57 }],
      unknown: [{ backendId: "b", uri: "x://c" }, { backendId: "b", uri: "x://d" }],
      lists: [{ list: "tools", position: 50 }],
    });
    await attached;
    expect(resumed.events.map((e) => [e.id, described([e])[0]])).toEqual([
      ["55", "x://a"],
      ["56", "notifications/tools/list_changed"],
      ["58", "x://b"],
      ["59", "x://c"],
      [expect.stringMatching(/^59\.\d+$/), "x://d"],
    ]);
  });

  it("answers a request that reaches the session after it left this member (moved) or ended, instead of never", async () => {
    const left = session().s;
    left.handOff("another member took it over");
    await expect(left.subscribe("x://a")).rejects.toMatchObject({ data: { moved: true } });
    await expect(left.unsubscribe("x://a")).rejects.toMatchObject({ data: { moved: true } });
    const ended = session().s;
    ended.close("client DELETE");
    await vi.waitFor(() => expect(ended.actor.getSnapshot().status).toBe("done"));
    await expect(ended.subscribe("x://a")).rejects.toMatchObject({ code: "BAD_PARAMS" });
  });

  it("announces everything once when the cluster cannot tell, or the id is foreign", async () => {
    const { s, clock } = session();
    await s.subscribe("x://a");
    await s.subscribe("x://b");
    const first = PreparedNotification.listChanged("tools", clock.cluster(1));
    s.deliver(first);
    for (let i = 0; i < 100; i++) s.deliver(PreparedNotification.listChanged("tools", clock.cluster(2 + i)));
    const late = stream();
    await s.attachStream(late, first.eventId);
    expect(described(late.events)).toEqual(everything);
    const foreign = stream();
    await s.attachStream(foreign, "not-an-id");
    expect(described(foreign.events)).toEqual(everything);
  });

  it("reads Last-Event-ID only in the forms the broker writes: any other form is unknown and re-notifies", async () => {
    const { s, clock } = session();
    await s.subscribe("x://a");
    const notes = [PreparedNotification.listChanged("tools", clock.cluster(16)), PreparedNotification.listChanged("prompts", clock.cluster(17))];
    for (const n of notes) s.deliver(n);
    const replayed = async (lastEventId: string) => {
      const resumed = stream();
      await s.attachStream(resumed, lastEventId);
      return resumed.events.map((e) => e.id);
    };
    expect(await replayed("16")).toEqual(["17"]);
    // Number() reads each of these as 16 (or -0, which replayed the whole history).
    for (const id of ["0x10", "-0", "+16", "016", "16.0", "16e0", "1.6e1", "16.", ".16", "16.01", "9".repeat(17)]) {
      const events = await replayed(id);
      expect(events, JSON.stringify(id)).toHaveLength(4); // x://a updated, and the three list_changed
      expect(events.includes("17"), JSON.stringify(id)).toBe(false);
    }
  });

  it("keeps exactly server.resumeHistory events: a gap that size is replayed, one longer goes to the cluster", async () => {
    const { s, clock } = session({ historyLimit: 4 });
    await s.subscribe("x://a");
    const from = PreparedNotification.listChanged("tools", clock.cluster(10));
    s.deliver(from);
    const kept = [11, 12, 13, 14].map((p) => PreparedNotification.listChanged("prompts", clock.cluster(p)));
    for (const n of kept) s.deliver(n);
    const exact = stream();
    await s.attachStream(exact, from.eventId);
    expect(exact.events.map((e) => e.id)).toEqual(["11", "12", "13", "14"]);
    s.deliver(PreparedNotification.listChanged("resources", clock.cluster(15)));
    const tooLate = stream();
    await s.attachStream(tooLate, from.eventId);
    expect(described(tooLate.events)).toEqual(["x://a", "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"]);
  });

  it("replays resource updates, kept as their URIs (or whole, when the backend said more), with the very frames first sent, after the ring wrapped", async () => {
    const { s, clock } = session({ historyLimit: 3 });
    const first = stream();
    await s.attachStream(first, undefined);
    const notes = [
      PreparedNotification.resourceUpdated("x://a/1", clock.cluster(1)),
      PreparedNotification.resourceUpdated("x://a/2", clock.cluster(2)),
      PreparedNotification.listChanged("tools", clock.cluster(3)),
      PreparedNotification.resourceUpdated("x://b", clock.cluster(4), { _meta: { "example.com/seq": 4 } }),
      PreparedNotification.resourceUpdated("x://a/3", clock.cluster(5)),
    ];
    for (const n of notes) s.deliver(n);
    const resumed = stream();
    await s.attachStream(resumed, notes[1]!.eventId);
    expect(resumed.events).toEqual(first.events.slice(2));
    expect(resumed.events[1]?.text).toContain('"_meta":{"example.com/seq":4}');
    const none = stream();
    await s.attachStream(none, notes[4]!.eventId);
    expect(none.events).toEqual([]);
  });

  it("keeps no events with server.resumeHistory 0: only the latest id resumes without asking the cluster", async () => {
    const { s, clock } = session({ historyLimit: 0 });
    await s.subscribe("x://a");
    const notes = [PreparedNotification.resourceUpdated("x://a/1", clock.cluster(1)), PreparedNotification.resourceUpdated("x://a/2", clock.cluster(2))];
    for (const n of notes) s.deliver(n);
    const current = stream();
    await s.attachStream(current, notes[1]!.eventId);
    expect(current.events).toEqual([]);
    const behind = stream();
    await s.attachStream(behind, notes[0]!.eventId);
    expect(behind.events).toHaveLength(4);
    expect(behind.events[0]?.text).toContain('"uri":"x://a"');
  });

  it("treats an empty Last-Event-ID as none, and tells a client that replaced an open stream without one everything once", async () => {
    const { s, clock } = session();
    await s.subscribe("x://a");
    const first = stream();
    await s.attachStream(first, undefined);
    s.deliver(PreparedNotification.listChanged("tools", clock.cluster(1)));
    const blank = stream();
    await s.attachStream(blank, "  "); // replaces `first`, which was still open
    expect(blank.events.map((e) => e.id)).toHaveLength(4);
    const closedFirst = stream();
    await s.attachStream(closedFirst, undefined);
    closedFirst.close();
    const afterClose = stream();
    await s.attachStream(afterClose, ""); // the stream it replaces was closed: only what it missed (nothing)
    expect(afterClose.events).toEqual([]);
    expect(formatEventId({ position: 3, local: 0 })).toBe("3");
  });
});

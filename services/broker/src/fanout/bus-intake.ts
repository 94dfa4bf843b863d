import type { BusMessage } from "@mcp-broker/shared";
import type { MemberHooks } from "@mcp-broker/member";
import type { Fanout } from "./fanout.js";

type ServedMessage = Exclude<BusMessage, { kind: `watch.${string}` | "console.listen" }>;

/**
 * Where the bus meets the serving side of a broker: the routing rules for what its member does not
 * handle itself (the member takes `watch.*`). Everything here arrives in the cluster's position
 * order, this broker's own updates included:
 * - `resource.updated` → the fan-out, to the sessions interested in its channel;
 * - `catalog.changed` → the catalog, which applies the stored lists (its list changes then come
 *   back out through the fan-out);
 * - `subscriptions.revoked` → the sessions, which drop what a limits job removed and say why;
 * - `session.moved` → the sessions: another member adopted one of this broker's, which lets go of it;
 * - `session.ended` → the sessions: one that had moved ended elsewhere; what was asked of it here fails;
 * - `client.answer` → the sessions: a client's answer to this broker's question, POSTed to another member;
 * - `held.retry`, `held.cancel`, `held.round` → the held calls: a modern client's retry of a call held on another member, its client giving up on it, and its answer;
 * - `console.census`, `console.sessions` → the console: another member's console asks for this one's sessions, and answers to this one's;
 * - `console.updates` → the console's live feed (heard only while one is open here);
 * - `bus.barrier` → the barrier that sent it: everything published before it has been handled here
 *   (a list change placed at its position is made now, before anything published after it);
 * - a gap (the bus reconnected) → every subscribed resource re-announced, every list re-read, and
 *   every session's record read again (a `session.moved` may be among what was lost);
 * - an update this broker's member could not publish (Redis away) → its own sessions, as its own event.
 */
export function busIntake(deps: {
  fanout: Fanout;
  catalog: { changed(message: Extract<BusMessage, { kind: "catalog.changed" }>): void; resync(): Promise<void> };
  sessions: {
    revoke(message: Extract<BusMessage, { kind: "subscriptions.revoked" }>): void;
    moved(message: Extract<BusMessage, { kind: "session.moved" }>): void;
    clientAnswered(message: Extract<BusMessage, { kind: "client.answer" }>): void;
    endedElsewhere(message: Extract<BusMessage, { kind: "session.ended" }>): void;
    doubtHeld(): void;
  };
  held: {
    retried(message: Extract<BusMessage, { kind: "held.retry" }>): void;
    retryCancelled(message: Extract<BusMessage, { kind: "held.cancel" }>): void;
    round(message: Extract<BusMessage, { kind: "held.round" }>): void;
  };
  census: { receive(message: Extract<BusMessage, { kind: "console.census" | "console.sessions" }>): void };
  feed: { receive(message: Extract<BusMessage, { kind: "console.updates" }>): void };
  barrier: { received(message: Extract<BusMessage, { kind: "bus.barrier" }>): void };
}): Required<Pick<MemberHooks, "busMessage" | "receiveGap" | "unpublished">> {
  const { fanout, catalog, sessions, held, census, feed, barrier } = deps;
  return {
    busMessage: (channel: string, message: ServedMessage) => {
      switch (message.kind) {
        case "resource.updated":
          fanout.receive(channel, message);
          return;
        case "catalog.changed":
          catalog.changed(message);
          return;
        case "subscriptions.revoked":
          sessions.revoke(message);
          return;
        case "session.moved":
          sessions.moved(message);
          return;
        case "client.answer":
          sessions.clientAnswered(message);
          return;
        case "session.ended":
          sessions.endedElsewhere(message);
          return;
        case "held.retry":
          held.retried(message);
          return;
        case "held.cancel":
          held.retryCancelled(message);
          return;
        case "held.round":
          held.round(message);
          return;
        case "console.census":
        case "console.sessions":
          census.receive(message);
          return;
        case "console.updates":
          feed.receive(message);
          return;
        case "bus.barrier":
          barrier.received(message);
      }
    },
    receiveGap: () => {
      fanout.gap();
      sessions.doubtHeld();
      void catalog.resync();
    },
    // Redis away: this broker's own update reaches its own sessions; the others hear of the gap.
    unpublished: (backendId, keys, uri, params) => fanout.receiveUnpublished(backendId, keys, uri, params),
  };
}

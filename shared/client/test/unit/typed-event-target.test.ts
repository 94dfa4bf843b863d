import { describe, expect, it } from "vitest";
import { TypedEventTarget } from "../../src/util/typed-event-target.js";

class Emitter extends TypedEventTarget<{ ping: { n: number }; other: string }> {
  fire(n: number): void {
    this.emit("ping", { n });
  }
}

describe("TypedEventTarget", () => {
  it("delivers the detail to on() and addEventListener listeners, and stops on unsubscribe", () => {
    const emitter = new Emitter();
    const seen: number[] = [];
    const stop = emitter.on("ping", ({ n }) => seen.push(n));
    const listener = (event: CustomEvent<{ n: number }>): void => void seen.push(event.detail.n * 10);
    emitter.addEventListener("ping", listener);
    emitter.fire(1);
    stop();
    emitter.removeEventListener("ping", listener);
    emitter.fire(2);
    expect(seen).toEqual([1, 10]);
    expect(emitter).toBeInstanceOf(EventTarget);
  });

  it("checks the names of on() and of typed addEventListener listeners; other names take the untyped standard overload", () => {
    const emitter = new Emitter();
    // @ts-expect-error -- on() takes the names of the event map only
    emitter.on("pnig", () => undefined);
    // @ts-expect-error -- a listener of the typed overload needs a name of the map
    emitter.addEventListener("pnig", (event: CustomEvent<{ n: number }>) => void event.detail.n);
    // The standard overload (kept so the class stays an EventTarget) takes any name with an
    // untyped listener: a misspelt name compiles, and the listener never runs.
    const seen: Event[] = [];
    emitter.addEventListener("pnig", (event) => void seen.push(event));
    emitter.fire(1);
    expect(seen).toEqual([]);
  });
});

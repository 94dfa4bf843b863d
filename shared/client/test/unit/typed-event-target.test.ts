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
});

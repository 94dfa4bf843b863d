import { describe, expect, it } from "vitest";
import { backoffDelay } from "../../src/backoff.js";

const policy = { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2 };

describe("backoffDelay", () => {
  it("grows exponentially up to the cap, with the jitter in the upper half", () => {
    const low = [0, 1, 2, 3, 4, 5].map((attempt) => backoffDelay(policy, attempt, () => 0));
    const high = [0, 1, 2, 3, 4, 5].map((attempt) => backoffDelay(policy, attempt, () => 1));
    expect(low).toEqual([50, 100, 200, 400, 500, 500]);
    expect(high).toEqual([100, 200, 400, 800, 1_000, 1_000]);
  });

  it("stays finite for absurd attempt counts", () => {
    expect(backoffDelay(policy, 10_000, () => 0.5)).toBe(750);
  });
});

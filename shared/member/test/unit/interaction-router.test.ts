import { describe, expect, it } from "vitest";
import { InteractionRouter, type ClientInteraction } from "../../src/upstream/client-interaction.js";

const client = (principal: string): ClientInteraction => ({ principal, supports: { sampling: true, elicitationForm: true, elicitationUrl: true, roots: true }, ask: async () => ({}) });

describe("the interaction router of a backend connection", () => {
  it("remembers the calls that ended early by principal, not one entry per call for good", async () => {
    const router = new InteractionRouter();
    for (let i = 0; i < 1_000; i++) {
      await router.run(client(i % 2 === 0 ? "ann" : "bob"), 30_000, async () => {
        throw new Error("the backend's error answer");
      }).catch(() => undefined);
    }
    expect((router as unknown as { endedEarly: Map<string, number> }).endedEarly.size).toBe(2);
  });
});

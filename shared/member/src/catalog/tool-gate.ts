import type { BackendConfig, HeldTool, ListBody } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { canonicalHash } from "./canonical-hash.js";

export type { HeldTool };

/** What the gate keeps of a backend's tools list between reloads: stored with the list in the cluster catalog. */
export type ToolGateState = NonNullable<ListBody["gate"]>;

/** Whether a backend's tool changes are gated at all (`toolChanges: "hold"` or `pinnedTools`). */
export function isGated(backend: Pick<BackendConfig, "toolChanges" | "pinnedTools">): boolean {
  return backend.toolChanges === "hold" || backend.pinnedTools !== undefined;
}

/**
 * Backend list changes are untrusted (a changed tool description can change what an agent does).
 * For backends with `toolChanges: "hold"` the first definition of each tool the cluster sees is
 * pinned; a later different definition, or a tool that appears later, is held: left out of
 * `tools/list`, refused on `tools/call`, logged with its hash and listed in `/readyz`, until an
 * operator pins that hash in `pinnedTools` (and restarts). With `pinnedTools`, exactly those
 * definitions pass. The pins are stored with the tools list in the cluster catalog, so they live as
 * long as it does (the memory engine's: the process; Redis's: until its keys are deleted), across
 * backend reconnects and whichever member reloads the list.
 *
 * `previous` is the gate of the stored list (undefined when none is stored: the first list).
 * Returns the gate to store with this list, or undefined for a backend that is not gated.
 */
export function gateTools(
  backend: Pick<BackendConfig, "id" | "toolChanges" | "pinnedTools">,
  previous: ToolGateState | undefined,
  tools: readonly Record<string, unknown>[],
  logger: Logger,
): ToolGateState | undefined {
  if (!isGated(backend)) return undefined;
  const fixed = backend.pinnedTools !== undefined;
  // Trust on first use ends with the first stored list; configured pins always come from the config.
  const pins: Record<string, string> = fixed ? { ...backend.pinnedTools } : { ...previous?.pins };
  const firstList = previous === undefined;
  const heldBefore = new Map((previous?.held ?? []).map((held) => [held.name, held.hash]));
  const held: HeldTool[] = [];
  const seen = new Set<string>();
  for (const tool of tools) {
    // The catalog keeps the first of a repeated name; so does the gate.
    if (typeof tool.name !== "string" || seen.has(tool.name)) continue;
    seen.add(tool.name);
    const hash = canonicalHash(tool);
    const pinned = pins[tool.name];
    if (pinned === hash || (pinned === undefined && !fixed && firstList)) {
      pins[tool.name] = hash;
      continue;
    }
    held.push({ backendId: backend.id, name: tool.name, hash, ...(pinned !== undefined && { pinned }) });
    if (heldBefore.get(tool.name) !== hash) {
      logger.warn(
        { backend: backend.id, tool: tool.name, hash, pinned, definition: tool },
        pinned === undefined
          ? "tool held: not pinned; pin its hash in backends[].pinnedTools to expose it"
          : "tool held: its definition changed since it was pinned; pin the new hash in backends[].pinnedTools to expose it",
      );
    }
  }
  return { pins, held };
}

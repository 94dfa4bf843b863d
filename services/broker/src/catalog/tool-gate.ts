import type { BackendConfig } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { canonicalHash } from "./canonical-hash.js";

const NONE: ReadonlySet<string> = new Set();

/** A tool definition the broker does not expose until an operator pins it. */
export interface HeldTool {
  backendId: string;
  /** The backend's own name for it. */
  name: string;
  /** Canonical hash of the held definition: what `pinnedTools` needs to let it through. */
  hash: string;
  /** The hash it was pinned with, when the held definition is a change of a pinned tool. */
  pinned?: string;
}

interface BackendGate {
  pins: Map<string, string>;
  /** Pins come from the config only (`pinnedTools`): nothing is pinned on first sight. */
  fixed: boolean;
  /** The first tools list was admitted (trust on first use ends there). */
  firstListSeen: boolean;
  held: Map<string, HeldTool>;
}

/**
 * Backend list changes are untrusted (a changed tool description can change what an agent does).
 * For backends with `toolChanges: "hold"` the first definition of each tool the broker sees is
 * pinned; a later different definition, or a tool that appears later, is held: left out of
 * `tools/list`, refused on `tools/call`, logged with its hash and listed in `/readyz`, until an
 * operator pins that hash in `pinnedTools` (and restarts). With `pinnedTools`, exactly those
 * definitions pass. Pins live as long as the broker process, across backend reconnects.
 */
export class ToolGate {
  private readonly gates = new Map<string, BackendGate>();

  constructor(
    backends: readonly BackendConfig[],
    private readonly logger: Logger,
  ) {
    for (const backend of backends) {
      if (backend.toolChanges !== "hold" && backend.pinnedTools === undefined) continue;
      const pins = new Map(Object.entries(backend.pinnedTools ?? {}));
      this.gates.set(backend.id, { pins, fixed: backend.pinnedTools !== undefined, firstListSeen: false, held: new Map() });
    }
  }

  /** Names of the tools of one complete list that are held (each logged once); the rest may be exposed. */
  admit(backendId: string, tools: readonly Record<string, unknown>[]): ReadonlySet<string> {
    const gate = this.gates.get(backendId);
    if (gate === undefined) return NONE;
    const held = new Map<string, HeldTool>();
    const seen = new Set<string>();
    for (const tool of tools) {
      // The catalog keeps the first of a repeated name; so does the gate.
      if (typeof tool.name !== "string" || seen.has(tool.name)) continue;
      seen.add(tool.name);
      const hash = canonicalHash(tool);
      const pinned = gate.pins.get(tool.name);
      if (pinned === hash || (pinned === undefined && !gate.fixed && !gate.firstListSeen)) {
        gate.pins.set(tool.name, hash);
        continue;
      }
      const entry: HeldTool = { backendId, name: tool.name, hash, ...(pinned !== undefined && { pinned }) };
      held.set(tool.name, entry);
      if (gate.held.get(tool.name)?.hash !== hash) {
        this.logger.warn(
          { backend: backendId, tool: tool.name, hash, pinned, definition: tool },
          pinned === undefined
            ? "tool held: not pinned; pin its hash in backends[].pinnedTools to expose it"
            : "tool held: its definition changed since it was pinned; pin the new hash in backends[].pinnedTools to expose it",
        );
      }
    }
    gate.firstListSeen = true;
    gate.held = held;
    return new Set(held.keys());
  }

  /** The backend dropped: its tools, held ones included, are gone until it lists them again. */
  clear(backendId: string): void {
    this.gates.get(backendId)?.held.clear();
  }

  all(): HeldTool[] {
    return [...this.gates.values()].flatMap((gate) => [...gate.held.values()]);
  }
}

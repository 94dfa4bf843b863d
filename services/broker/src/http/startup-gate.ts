export type GateState = "holding" | "open" | "closed";

/**
 * Holds `/mcp` requests that arrive after the port is bound but before the broker serves. Clients
 * list right after connecting, and many never list again: a request held while the backends
 * connect gets the full lists, where one answered at once would get empty ones. Held requests go on,
 * in arrival order, when the gate opens; when it closes first (shutdown), they are dropped, and
 * their connections end with every other.
 */
export class StartupGate {
  private stateValue: GateState = "holding";
  private readonly held = new Set<(open: boolean) => void>();

  get state(): GateState {
    return this.stateValue;
  }

  /** Resolves true once the gate is open (at once if it is), false if it closes first. */
  pass(): Promise<boolean> {
    if (this.stateValue !== "holding") return Promise.resolve(this.stateValue === "open");
    return new Promise((resolve) => this.held.add(resolve));
  }

  open(): void {
    this.settle("open");
  }

  /** The broker stops: held requests are dropped, and new ones refused (see http-server.ts). */
  close(): void {
    this.settle("closed");
  }

  private settle(state: "open" | "closed"): void {
    if (this.stateValue === "closed" || (state === "open" && this.stateValue === "open")) return;
    this.stateValue = state;
    for (const resolve of this.held) resolve(state === "open");
    this.held.clear();
  }
}

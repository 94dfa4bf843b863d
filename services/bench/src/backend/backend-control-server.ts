import { createServer, type Server, type Socket } from "node:net";
import { socketLink } from "../core/links.js";
import { RpcClient } from "../core/rpc.js";
import type { BackendApi } from "./backend-api.js";

/**
 * The orchestrator's end of the backend control channel. Bench backends are started by brokers
 * (as stdio backends), so they call in: each connection becomes an RPC client, handed out in
 * arrival order by `next()`.
 */
export class BackendControlServer {
  private readonly server: Server;
  private readonly arrived: RpcClient<BackendApi>[] = [];
  private readonly waiters: ((client: RpcClient<BackendApi>) => void)[] = [];
  private readonly sockets = new Set<Socket>();
  private seq = 0;

  private constructor(server: Server) {
    this.server = server;
    server.on("connection", (socket) => {
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
      const client = new RpcClient<BackendApi>(socketLink(socket), `backend-${++this.seq}`);
      const waiter = this.waiters.shift();
      if (waiter !== undefined) waiter(client);
      else this.arrived.push(client);
    });
  }

  static async start(): Promise<BackendControlServer> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    return new BackendControlServer(server);
  }

  get port(): number {
    const address = this.server.address();
    if (address === null || typeof address === "string") throw new Error("control server not listening");
    return address.port;
  }

  /** The next backend to connect (or the oldest one not yet handed out). */
  next(timeoutMs = 30_000): Promise<RpcClient<BackendApi>> {
    const ready = this.arrived.shift();
    if (ready !== undefined) return Promise.resolve(ready);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const index = this.waiters.indexOf(accept);
        if (index >= 0) this.waiters.splice(index, 1);
        reject(new Error(`no bench backend connected within ${timeoutMs} ms`));
      }, timeoutMs);
      const accept = (client: RpcClient<BackendApi>): void => {
        clearTimeout(timer);
        resolve(client);
      };
      this.waiters.push(accept);
    });
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

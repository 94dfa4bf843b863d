/**
 * The relay of the baseline server: the floor of a request that needs one upstream round trip.
 * It starts its own bench backend, over the transport an engine's brokers use (stdio for the
 * memory engine, Streamable HTTP for the Redis engines), initializes one MCP session on it, and
 * hands each request it is given to the backend as it is (its own id), resolving with the
 * backend's JSON-RPC answer. No SDK, no validation, no state: what a hand-written pass-through costs.
 */
import { spawn, fork, type ChildProcess } from "node:child_process";
import { createServer, type AddressInfo, type Server } from "node:net";
import { Agent, request } from "node:http";
import { fileURLToPath } from "node:url";
import { BACKEND_ENV } from "../backend/backend-api.js";
import { SseParser } from "../load/sse-parser.js";

export type RelayTransport = "stdio" | "http";

const BACKEND = new URL("../backend/bench-backend.js", import.meta.url);
const LEGACY_VERSION = "2025-11-25";
const INITIALIZE = { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { name: "bench-raw-relay", version: "1.0.0" } };

interface Message {
  id?: unknown;
  method?: unknown;
  [key: string]: unknown;
}

export interface Relay {
  /** Sends `message` (a JSON-RPC request) to the backend; resolves with the backend's answer. */
  call(message: Message): Promise<Message>;
  close(): Promise<void>;
}

/** The backend's control socket: held open (the backend exits when it closes), never used. */
async function controlSocket(): Promise<Server> {
  const server = createServer((socket) => socket.resume());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

export async function startRelay(transport: RelayTransport): Promise<Relay> {
  const control = await controlSocket();
  const env = { ...process.env, [BACKEND_ENV.controlPort]: String((control.address() as AddressInfo).port) };
  const child = transport === "stdio" ? spawn(process.execPath, [fileURLToPath(BACKEND)], { env, stdio: ["pipe", "pipe", "inherit"] }) : fork(BACKEND, [], { env: { ...env, [BACKEND_ENV.transport]: "http" } });
  try {
    return transport === "stdio" ? await stdioRelay(child, control) : await httpRelay(child, control);
  } catch (error) {
    await stop(child, control);
    throw error;
  }
}

async function stdioRelay(child: ChildProcess, control: Server): Promise<Relay> {
  const { stdin, stdout } = child;
  if (stdin === null || stdout === null) throw new Error("the relay's bench backend has no stdio");
  const pending = new Map<number, { resolve: (answer: Message) => void; reject: (error: Error) => void }>();
  let gone: Error | undefined;
  const fail = (error: Error): void => {
    gone ??= error;
    for (const { reject } of pending.values()) reject(gone);
    pending.clear();
  };
  child.once("error", fail);
  child.once("exit", (code, signal) => fail(new Error(`the relay's bench backend exited (${signal ?? code})`)));
  let nextId = 0;
  let buffered = "";
  stdout.setEncoding("utf8");
  stdout.on("data", (chunk: string) => {
    buffered += chunk;
    for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      let answer: Message;
      try {
        answer = JSON.parse(line) as Message;
      } catch {
        continue; // not JSON-RPC: skipped, as a client skips it
      }
      const waiting = pending.get(answer.id as number);
      if (waiting === undefined) continue;
      pending.delete(answer.id as number);
      waiting.resolve(answer);
    }
  });
  const call = (message: Message): Promise<Message> =>
    new Promise((resolve, reject) => {
      if (gone !== undefined) return reject(gone);
      const id = ++nextId;
      pending.set(id, { resolve: (answer) => resolve({ ...answer, id: message.id }), reject });
      stdin.write(`${JSON.stringify({ ...message, id })}\n`);
    });
  await call({ jsonrpc: "2.0", id: 0, method: "initialize", params: INITIALIZE });
  stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })}\n`);
  return { call, close: () => stop(child, control) };
}

async function httpRelay(child: ChildProcess, control: Server): Promise<Relay> {
  const url = await new Promise<string>((resolve, reject) => {
    child.once("exit", () => reject(new Error("the relay's bench backend exited before it listened")));
    child.on("message", (message: { rpc?: string; ok?: boolean; result?: { url: string }; error?: string }) => {
      if (message.rpc !== "res") return;
      if (message.ok === true && message.result !== undefined) resolve(message.result.url);
      else reject(new Error(message.error ?? "listen failed"));
    });
    child.send({ rpc: "req", id: 1, method: "listen", params: {} });
  });
  const agent = new Agent({ keepAlive: true });
  let sessionId: string | undefined;
  // The workers' ids repeat across workers: each request goes out with an id of the relay's own.
  let nextId = 0;
  const post = (message: Message): Promise<Message | undefined> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" };
      if (sessionId !== undefined) Object.assign(headers, { "mcp-session-id": sessionId, "mcp-protocol-version": LEGACY_VERSION });
      const req = request(url, { method: "POST", agent, headers }, (res) => {
        const session = res.headers["mcp-session-id"];
        if (typeof session === "string") sessionId = session;
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => {
          if (message.id === undefined) return resolve(undefined);
          // An event-stream answer: the event whose data is the response (not a priming event's).
          const events: string[] = [];
          if ((res.headers["content-type"] ?? "").startsWith("text/event-stream")) new SseParser((data) => events.push(data)).push(body);
          else events.push(body);
          for (const data of events) {
            try {
              const answer = JSON.parse(data) as Message;
              if (answer.id === message.id) return resolve(answer);
            } catch {
              // not JSON: not the answer
            }
          }
          reject(new Error(`relay: HTTP ${res.statusCode} ${body.slice(0, 200)}`));
        });
      });
      req.on("error", reject);
      req.end(JSON.stringify(message));
    });
  await post({ jsonrpc: "2.0", id: 0, method: "initialize", params: INITIALIZE });
  await post({ jsonrpc: "2.0", method: "notifications/initialized" });
  return {
    call: async (message) => ({ ...((await post({ ...message, id: ++nextId })) ?? {}), id: message.id }),
    close: async () => {
      agent.destroy();
      await stop(child, control);
    },
  };
}

async function stop(child: ChildProcess, control: Server): Promise<void> {
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise<void>((resolve) => child.once("exit", () => resolve()));
  control.close();
  child.kill();
  await exited;
}

import { getEventListeners } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createNetServer, type AddressInfo, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { BackendHttp, TextResponse, TOO_LARGE, closeAgents, keepAliveAgents, type EventTap, type HttpAgents } from "../../src/upstream/backend-http.js";

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

let server: Server | undefined;
let agents: HttpAgents | undefined;
const sockets = new Set<Socket>();

async function serve(handler: Handler): Promise<string> {
  server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (body += chunk));
    req.on("end", () => handler(req, res, body));
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

function client(options: { tap?: EventTap; headersTimeoutMs?: number; backlog?: () => Promise<void> | undefined; maxMessageBytes?: number } = {}): BackendHttp {
  agents = keepAliveAgents();
  return new BackendHttp({
    agents,
    ...(options.maxMessageBytes !== undefined && { maxMessageBytes: options.maxMessageBytes, oversized: (bytes: number) => ({ code: -32003, message: "too large", data: { bytes } }) }),
    ...(options.tap !== undefined && { prepare: (init) => ({ init, tap: options.tap }) }),
    ...(options.headersTimeoutMs !== undefined && { headersTimeoutMs: options.headersTimeoutMs }),
    ...(options.backlog !== undefined && { backlog: options.backlog }),
  });
}

afterEach(async () => {
  if (agents !== undefined) closeAgents(agents);
  agents = undefined;
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
  server = undefined;
});

/** Writes `piece` every few milliseconds until the client goes away: a message without end. */
function endless(res: ServerResponse, piece: string): void {
  const timer = setInterval(() => res.write(piece), 2);
  res.on("close", () => clearInterval(timer));
}

describe("BackendHttp (the fetch of an HTTP backend connection)", () => {
  it("does not read a message over the size limit on: a request's answer gets its error response in its place, another event stream ends there, a plain body fails", async () => {
    const url = await serve((req, res, body) => {
      if (req.method === "GET") {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: {}\n\ndata: ");
        endless(res, "y".repeat(500));
      } else if (body.includes('"sse"')) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: ");
        endless(res, "x".repeat(500));
      } else {
        res.writeHead(200, { "content-type": "application/json" });
        endless(res, " ".repeat(500));
      }
    });
    const http = client({ tap: () => true, maxMessageBytes: 2_000 });
    const answer = await http.fetch(url, { method: "POST", body: '{"method":"tools/call","params":{"name":"sse"},"jsonrpc":"2.0","id":7}' });
    expect(await answer.json()).toMatchObject({ jsonrpc: "2.0", id: 7, error: { code: -32003, message: "too large" } });
    const plain = await http.fetch(url, { method: "POST", body: '{"method":"tools/call","params":{"name":"json"},"jsonrpc":"2.0","id":8}' });
    await expect(plain.text()).rejects.toMatchObject({ cause: { code: TOO_LARGE } });
    // An event stream of no request ends there (the transport opens it again); the events before pass.
    const stream = await http.fetch(url, { method: "GET" });
    expect(await stream.text()).toBe("data: {}\n\n");
  });


  it("sends method, headers and body, and answers status, headers and body like fetch", async () => {
    const url = await serve((req, res, body) => {
      res.writeHead(202, { "content-type": "application/json", "mcp-session-id": "s-1" });
      res.end(JSON.stringify({ method: req.method, accept: req.headers.accept, session: req.headers["mcp-session-id"], body }));
    });
    const response = await client().fetch(url, { method: "POST", headers: new Headers({ accept: "application/json, text/event-stream", "mcp-session-id": "abc" }), body: '{"x":"ü"}' });
    expect(response.status).toBe(202);
    expect(response.headers.get("mcp-session-id")).toBe("s-1");
    expect(await response.json()).toEqual({ method: "POST", accept: "application/json, text/event-stream", session: "abc", body: '{"x":"ü"}' });
  });

  it("keeps connections alive: requests in a row share one socket", async () => {
    const url = await serve((_req, res) => res.end("{}"));
    const http = client();
    for (let i = 0; i < 5; i++) await (await http.fetch(url, { method: "POST", body: "{}" })).text();
    expect(sockets.size).toBe(1);
  });

  it("puts one abort listener on the transport's signal however many requests share it, none per request", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      setTimeout(() => res.end('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'), 20);
    });
    const warnings: Error[] = [];
    const onWarning = (warning: Error): number => warnings.push(warning);
    process.on("warning", onWarning);
    const http = client({ tap: () => true });
    const transport = new AbortController();
    const inFlight = Array.from({ length: 30 }, () => http.fetch(url, { method: "POST", body: "{}", signal: transport.signal }));
    expect(getEventListeners(transport.signal, "abort").length).toBeLessThanOrEqual(1);
    await Promise.all((await Promise.all(inFlight)).map((response) => response.text()));
    for (let i = 0; i < 30; i++) await (await http.fetch(url, { method: "POST", body: "{}", signal: transport.signal })).text();
    expect(getEventListeners(transport.signal, "abort").length).toBeLessThanOrEqual(1);
    await new Promise((resolve) => setImmediate(resolve));
    process.off("warning", onWarning);
    expect(warnings.filter((warning) => warning.name === "MaxListenersExceededWarning")).toEqual([]);
    // The requests that ended are not aborted with the signal: only those in flight are.
    const pending = http.fetch(url, { method: "POST", body: "{}", signal: transport.signal });
    transport.abort(new Error("transport closed"));
    await expect(pending).rejects.toThrow("transport closed");
  });

  it("aborts a request waiting for its answer, and a body being read, with the signal's reason", async () => {
    const url = await serve((req, res) => {
      if (req.method === "GET") {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(": open\n\n");
      }
      // POST: never answered.
    });
    const http = client();
    const waiting = new AbortController();
    const pending = http.fetch(url, { method: "POST", body: "{}", signal: waiting.signal });
    await new Promise((resolve) => setTimeout(resolve, 50));
    waiting.abort(new Error("closed by the transport"));
    await expect(pending).rejects.toThrow("closed by the transport");
    const reading = new AbortController();
    const stream = await http.fetch(url, { method: "GET", signal: reading.signal });
    const reader = stream.body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toBe(": open\n\n");
    reading.abort(new Error("stream closed"));
    await expect(reader?.read()).rejects.toThrow("stream closed");
    expect(getEventListeners(reading.signal, "abort")).toHaveLength(0);
  });

  it("taps event-stream responses event by event and leaves other responses alone", async () => {
    const url = await serve((req, res) => {
      if (req.url?.endsWith("json") === true) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end("data: drop\n\n");
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: keep 1\n\nda");
      setTimeout(() => res.end("ta: drop\n\ndata: keep 2\n\n"), 20);
    });
    const seen: string[] = [];
    const http = client({
      tap: (event) => {
        seen.push(event);
        return !event.includes("drop");
      },
    });
    expect(await (await http.fetch(url, { method: "POST", body: "{}" })).text()).toBe("data: keep 1\n\ndata: keep 2\n\n");
    expect(seen).toEqual(["data: keep 1", "data: drop", "data: keep 2"]);
    expect(await (await http.fetch(`${url}json`, { method: "POST", body: "{}" })).text()).toBe("data: drop\n\n");
  });

  it("answers a request whose event stream holds only its JSON-RPC response (after a priming event) as JSON, on the kept-alive connection", async () => {
    const response = '{"jsonrpc":"2.0","id":7,"result":{"ok":true}}';
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": "s-1" });
      res.write("id: p-1\ndata: \n\n");
      setTimeout(() => res.end(`event: message\nid: e-2\ndata: ${response}\n\n`), 20);
    });
    const seen: string[] = [];
    const http = client({ tap: (event) => seen.push(event) > 0 });
    const request = { method: "POST", body: '{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{"uri":"x://1"}}' };
    const answer = await http.fetch(url, request);
    expect(answer.headers.get("content-type")).toBe("application/json");
    expect(answer.headers.get("mcp-session-id")).toBe("s-1");
    expect(await answer.text()).toBe(response);
    expect(seen).toEqual(["id: p-1\ndata: ", `event: message\nid: e-2\ndata: ${response}`]);
    expect(await (await http.fetch(url, request)).json()).toEqual(JSON.parse(response));
    expect(sockets.size).toBe(1);
  });

  it("answers a response read before it was handed over as a Response whose body reads once, in any form, as fetch's would", async () => {
    const text = '{"jsonrpc":"2.0","id":1,"result":{"é":1}}';
    const init = { status: 200, statusText: "OK", headers: new Headers({ "content-type": "application/json" }) };
    const answer = new TextResponse(text, init);
    expect(answer).toBeInstanceOf(Response);
    expect([answer.ok, answer.status, answer.statusText, answer.headers.get("content-type"), answer.bodyUsed]).toEqual([true, 200, "OK", "application/json", false]);
    const copy = answer.clone();
    expect(await answer.json()).toEqual(JSON.parse(text));
    expect(answer.bodyUsed).toBe(true);
    for (const read of [() => answer.text(), () => answer.json(), () => answer.arrayBuffer(), () => answer.bytes()]) await expect(read()).rejects.toThrow(TypeError);
    expect(() => answer.clone()).toThrow(TypeError);
    expect(await copy.text()).toBe(text);
    expect(new TextDecoder().decode(await new TextResponse(text, init).arrayBuffer())).toBe(text);
    // Read as a stream: the stream is the body, and the body is then used.
    const streamed = new TextResponse(text, init);
    const reader = streamed.body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toBe(text);
    expect(streamed.bodyUsed).toBe(true);
    await expect(streamed.text()).rejects.toThrow(TypeError);
    await expect(new TextResponse("not json", init).json()).rejects.toThrow(SyntaxError);
  });

  it("hands a request's event stream over at once, as it is, when anything but the response comes first or follows it", async () => {
    let respond: () => void = () => undefined;
    const url = await serve((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const first = req.url?.endsWith("retry") === true ? "retry: 500\nid: p\ndata: \n\n" : 'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n';
      res.write(first);
      respond = () => res.end('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
    });
    const http = client({ tap: () => true });
    for (const path of ["", "retry"]) {
      const answer = await http.fetch(`${url}${path}`, { method: "POST", body: '{"jsonrpc":"2.0","id":1,"method":"tools/call"}' });
      // Handed over before the response was even written: a progress notification is not held back.
      expect(answer.headers.get("content-type")).toBe("text/event-stream");
      const reader = answer.body?.getReader();
      expect(new TextDecoder().decode((await reader?.read())?.value)).toContain(path === "" ? "notifications/progress" : "retry: 500");
      respond();
      expect(new TextDecoder().decode((await reader?.read())?.value)).toBe('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
      expect((await reader?.read())?.done).toBe(true);
    }
  });

  it("keeps a second message after the response, a listen's answer, a stream left open after the response and one cut off before its end as event streams", async () => {
    const response = 'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n';
    const url = await serve((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (req.url?.endsWith("open") === true) res.write(response);
      else if (req.url?.endsWith("cut") === true) {
        res.write("id: p-1\ndata: \n\n");
        setTimeout(() => res.socket?.destroy(), 20);
      } else if (req.url?.endsWith("two") === true) res.end(`${response}data: {"jsonrpc":"2.0","method":"notifications/message"}\n\n`);
      else res.end(response);
    });
    const http = client({ tap: () => true });
    const two = await http.fetch(`${url}two`, { method: "POST", body: "{}" });
    expect(two.headers.get("content-type")).toBe("text/event-stream");
    expect(await two.text()).toBe(`${response}data: {"jsonrpc":"2.0","method":"notifications/message"}\n\n`);
    const listen = await http.fetch(url, { method: "POST", body: '{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}' });
    expect(listen.headers.get("content-type")).toBe("text/event-stream");
    expect(await listen.text()).toBe(response);
    // A server that keeps the stream open after the response does not hold the response back.
    const open = await http.fetch(`${url}open`, { method: "POST", body: "{}" });
    expect(open.headers.get("content-type")).toBe("text/event-stream");
    expect(new TextDecoder().decode((await open.body?.getReader().read())?.value)).toBe(response);
    // The SDK gets what came before the cut (the priming event's id, to resume from), then the error.
    const cut = await http.fetch(`${url}cut`, { method: "POST", body: "{}" });
    expect(cut.headers.get("content-type")).toBe("text/event-stream");
    const reader = cut.body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toBe("id: p-1\ndata: \n\n");
    await expect(reader?.read()).rejects.toThrow("terminated");
  });

  it("hands over at once a request's stream on which the tap takes events, so its backlog holds the reading back", async () => {
    let respond: () => void = () => undefined;
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write('data: {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x://1"}}\n\n');
      respond = () => res.end('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
    });
    const taken: string[] = [];
    const http = client({ tap: (event) => (event.includes("updated") ? taken.push(event) < 0 : true) });
    const answer = await http.fetch(url, { method: "POST", body: '{"jsonrpc":"2.0","id":1,"method":"tools/call"}' });
    expect(taken).toHaveLength(1);
    expect(answer.headers.get("content-type")).toBe("text/event-stream");
    respond();
    expect(await answer.text()).toBe('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
  });

  it("hands over an event split mid-character across chunks intact", async () => {
    const notification = 'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"héllo ✓"}}\r\n\r\n';
    const bytes = Buffer.from(notification);
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const cut = bytes.indexOf(Buffer.from("é")) + 1;
      res.write(bytes.subarray(0, cut));
      setTimeout(() => res.write(bytes.subarray(cut)), 10);
      setTimeout(() => res.end('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'), 20);
    });
    const answer = await client({ tap: () => true }).fetch(url, { method: "POST", body: "{}" });
    expect(answer.headers.get("content-type")).toBe("text/event-stream");
    expect(await answer.text()).toBe(`${notification}data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n`);
  });

  it("stops reading a backend's answers first once one of its streams stayed open after the response", async () => {
    let requests = 0;
    const url = await serve((_req, res) => {
      requests++;
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (requests === 1) {
        res.write('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
        setTimeout(() => res.end(), 100);
      } else setTimeout(() => res.end('data: {"jsonrpc":"2.0","id":2,"result":{}}\n\n'), 50);
    });
    const http = client({ tap: () => true });
    const first = await http.fetch(url, { method: "POST", body: "{}" });
    expect(first.headers.get("content-type")).toBe("text/event-stream");
    await first.text();
    // The second answer is a lone response too, but this backend lingers: handed over at its headers.
    const second = await http.fetch(url, { method: "POST", body: "{}" });
    expect(second.headers.get("content-type")).toBe("text/event-stream");
    expect(await second.text()).toBe('data: {"jsonrpc":"2.0","id":2,"result":{}}\n\n');
  });

  it("rejects a request aborted while its event stream is read for the response alone", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("id: p-1\ndata: \n\n");
    });
    const aborting = new AbortController();
    const answer = client({ tap: () => true }).fetch(url, { method: "POST", body: "{}", signal: aborting.signal });
    setTimeout(() => aborting.abort(new Error("caller gave up")), 30);
    await expect(answer).rejects.toThrow("caller gave up");
  });

  it("reads no more of a tapped stream while the tap's backlog is being handled", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n");
      setTimeout(() => res.write("data: 2\n\n"), 30);
      setTimeout(() => res.end("data: 3\n\n"), 60);
    });
    const seen: string[] = [];
    let handled: () => void = () => undefined;
    const backlog = new Promise<void>((resolve) => (handled = resolve));
    const http = client({ tap: (event) => seen.push(event) < 0, backlog: () => (seen.length === 1 ? backlog : undefined) });
    const body = (await http.fetch(url, { method: "GET" })).text();
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(seen).toEqual(["data: 1"]);
    handled();
    expect(await body).toBe("");
    expect(seen).toEqual(["data: 1", "data: 2", "data: 3"]);
  });

  it("answers a 204 with no body, and returns a redirect as it is (the transport decides)", async () => {
    const url = await serve((req, res) => {
      if (req.method === "DELETE") res.writeHead(204).end();
      else res.writeHead(307, { location: "/elsewhere" }).end();
    });
    const http = client();
    const deleted = await http.fetch(url, { method: "DELETE" });
    expect(deleted.status).toBe(204);
    expect(deleted.body).toBeNull();
    const redirect = await http.fetch(url, { method: "POST", body: "{}", redirect: "manual" });
    expect(redirect.status).toBe(307);
    expect(redirect.headers.get("location")).toBe("/elsewhere");
  });

  it("rejects a network failure like fetch: a TypeError with the socket error and its code as cause", async () => {
    const url = await serve((_req, res) => res.end());
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    server = undefined;
    const failure = await client()
      .fetch(url, { method: "POST", body: "{}" })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(TypeError);
    expect((failure as TypeError & { cause: { code: string } }).cause.code).toBe("ECONNREFUSED");
  });

  it("rejects a response status fetch cannot represent, without throwing out of the socket's callback", async () => {
    const rawSockets: Socket[] = [];
    const raw = createNetServer((socket) => {
      rawSockets.push(socket);
      socket.end("HTTP/1.1 999 Made Up\r\ncontent-length: 0\r\n\r\n");
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
    try {
      const failure = await client()
        .fetch(`http://127.0.0.1:${(raw.address() as AddressInfo).port}/mcp`, { method: "POST", body: "{}" })
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(TypeError);
      expect((failure as TypeError & { cause: { message: string } }).cause.message).toBe("invalid response status 999");
    } finally {
      for (const socket of rawSockets) socket.destroy();
      await new Promise<void>((resolve) => raw.close(() => resolve()));
    }
  });

  it("gives up waiting for response headers after the headers timeout", async () => {
    const url = await serve(() => undefined);
    const failure = await client({ headersTimeoutMs: 100 })
      .fetch(url, { method: "POST", body: "{}" })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(TypeError);
    expect((failure as TypeError & { cause: { code: string } }).cause.code).toBe("UND_ERR_HEADERS_TIMEOUT");
  });

  it("a body cut off before its end errors its stream instead of ending it quietly", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n");
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const response = await client({ tap: () => true }).fetch(url, { method: "POST", body: "{}" });
    await expect(response.text()).rejects.toThrow();
  });

  it("sends a request again on a fresh connection when the server had closed the kept-alive one", async () => {
    let requests = 0;
    const url = await serve((_req, res) => {
      requests++;
      res.end("{}");
    });
    const http = client();
    // Three kept-alive connections in the pool...
    await Promise.all(Array.from({ length: 3 }, async () => (await http.fetch(url, { method: "POST", body: "{}" })).text()));
    expect(sockets.size).toBe(3);
    // ...all dropped by the server without the client hearing of it first (it was busy, say).
    for (const socket of sockets) socket.resetAndDestroy();
    const response = await http.fetch(url, { method: "POST", body: "{}" });
    expect(await response.text()).toBe("{}");
    expect(requests).toBe(4);
  });
});

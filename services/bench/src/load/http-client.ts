import { request, type Agent, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from "node:http";

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface HttpCall {
  method: "GET" | "POST" | "DELETE";
  headers: Record<string, string>;
  body?: string;
  /** Fails the request when no response (its headers) arrives within this long; a streaming body is not limited. */
  timeoutMs?: number;
  /** The local address to connect from (a loopback alias such as 127.0.0.2: more source ports). */
  localAddress?: string;
}

/** One request with the whole response body. A reset of a reused keep-alive socket is retried once. */
export async function fetchText(agent: Agent, url: URL, call: HttpCall): Promise<HttpResponse> {
  try {
    return await once(agent, url, call);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ECONNRESET") return once(agent, url, call);
    throw error;
  }
}

function once(agent: Agent, url: URL, call: HttpCall): Promise<HttpResponse> {
  return new Promise((resolve, reject) => {
    const req = send(agent, url, call);
    req.once("error", reject);
    req.once("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.once("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
      res.once("error", reject);
    });
  });
}

/** Opens a streaming response; resolves at its headers (the body is read by the caller). */
export function openStream(agent: Agent, url: URL, call: HttpCall): Promise<{ req: ClientRequest; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = send(agent, url, call);
    req.once("error", reject);
    req.once("response", (res) => resolve({ req, res }));
  });
}

function send(agent: Agent, url: URL, call: HttpCall): ClientRequest {
  const headers: Record<string, string | number> = { ...call.headers };
  if (call.body !== undefined) headers["content-length"] = Buffer.byteLength(call.body);
  const req = request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: call.method, agent, headers, ...(call.localAddress !== undefined && { localAddress: call.localAddress }) });
  if (call.timeoutMs !== undefined) {
    const timer = setTimeout(() => req.destroy(new Error(`no response within ${call.timeoutMs} ms`)), call.timeoutMs);
    req.once("response", () => clearTimeout(timer));
    req.once("close", () => clearTimeout(timer));
  }
  req.end(call.body);
  return req;
}

/** Reads the rest of a response that turned out not to be a stream, for the error message. */
export function drain(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    res.on("data", (chunk: Buffer) => chunks.push(chunk));
    res.once("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    res.once("error", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

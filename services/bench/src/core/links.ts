import type { ChildProcess } from "node:child_process";
import type { Socket } from "node:net";
import type { Link } from "./rpc.js";

/** The Node IPC channel of this process to its parent (a forked child's side). */
export function parentLink(): Link {
  return {
    send: (message) => process.send?.(message),
    onMessage: (listener) => process.on("message", listener),
    onClose: (listener) => process.once("disconnect", listener),
  };
}

/** The Node IPC channel to a forked child (the parent's side). */
export function childLink(child: ChildProcess): Link {
  return {
    send: (message) => {
      if (child.connected) child.send(message as object);
    },
    onMessage: (listener) => child.on("message", listener),
    onClose: (listener) => child.once("exit", () => listener()),
  };
}

/** Newline-delimited JSON over a socket. */
export function socketLink(socket: Socket): Link {
  const listeners: ((message: unknown) => void)[] = [];
  let buffer = "";
  socket.setEncoding("utf8");
  socket.on("data", (chunk: string) => {
    buffer += chunk;
    let newline = buffer.indexOf("\n");
    while (newline >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      if (line.length > 0) {
        const message: unknown = JSON.parse(line);
        for (const listener of listeners) listener(message);
      }
      newline = buffer.indexOf("\n");
    }
  });
  return {
    send: (message) => {
      if (!socket.destroyed) socket.write(`${JSON.stringify(message)}\n`);
    },
    onMessage: (listener) => listeners.push(listener),
    onClose: (listener) => socket.once("close", () => listener()),
  };
}

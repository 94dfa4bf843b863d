import { createServer } from "node:net";

/** A TCP port free on 127.0.0.1 right now (the OS's pick; another process may take it before it is used). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
export async function portInUse(port: number): Promise<boolean> {
  const server = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve());
    });
    return false;
  } catch {
    return true;
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

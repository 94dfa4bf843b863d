import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The broker's version, from its package.json (reported as serverInfo.version). */
export const BROKER_VERSION: string = (require("../package.json") as { version: string }).version;

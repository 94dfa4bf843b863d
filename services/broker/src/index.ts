/** The broker as a library: build one from a validated config (see `createBroker`). */
export { createBroker, type Broker, type BrokerDeps } from "./broker.js";
export { createLogger, redactUrl, startBackendsOrClose, stopOnSignals, type Logger } from "@mcp-broker/member";
export { serveH2cBeside } from "./http/h2c.js";

/** The broker as a library: build one from a validated config (see `createBroker`). */
export { createBroker, redactUrl, type Broker, type BrokerDeps } from "./broker.js";
export { createLogger, type Logger } from "./logger.js";
export { startBackendsOrClose, stopOnSignals } from "./lifecycle.js";

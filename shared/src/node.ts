/** Node-only parts of shared (file system); the root entry stays usable in browsers. */
export * from "./config/load.js";
export * from "./engine/redis/keys.js";
export * from "./engine/redis/redis-bus.js";
export * from "./engine/redis/redis-registry.js";
export * from "./engine/redis/redis-leases.js";
export * from "./engine/redis/redis-engine.js";
export * from "./engine/redis/bullmq-job-queue.js";
export * from "./engine/redis/redis-catalog-store.js";
export * from "./engine/redis/redis-update-log.js";
export * from "./engine/redis/redis-session-store.js";

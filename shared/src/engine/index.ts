export * from "./bus.js";
export * from "./registry.js";
export * from "./leases.js";
export * from "./jobs.js";
export * from "./memory/memory-bus.js";
export * from "./memory/memory-registry.js";
export * from "./memory/memory-leases.js";
export * from "./memory/memory-job-queue.js";

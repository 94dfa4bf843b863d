export * from "./errors.js";
export * from "./config/index.js";
export * from "./protocol/wire-methods.js";
export * from "./clock.js";
export * from "./engine/index.js";
export * from "./naming/index.js";
export * from "./backoff.js";

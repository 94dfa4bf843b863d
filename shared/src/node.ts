/** Node-only parts of shared (file system); the root entry stays usable in browsers. */
export * from "./config/load.js";

export * from "./schema.js";
export * from "./parse.js";

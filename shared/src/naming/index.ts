export { MAX_MATCH_LENGTH, UriTemplate, UriTemplateError, type UriTemplateMatch, type UriTemplateValue, type UriTemplateVariables } from "./uri-template.js";
export * from "./namespacing.js";

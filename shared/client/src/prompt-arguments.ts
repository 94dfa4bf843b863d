/** A JSON value, as InspectorClient types call arguments (its `JsonValue` admits `undefined` too). */
export type JsonValue = string | number | boolean | null | undefined | JsonValue[] | { [key: string]: JsonValue };

/**
 * InspectorClient's `convertPromptArguments`: prompt arguments are strings on the wire, so a string
 * passes as it is, `null` and `undefined` become "null" and "undefined", and any other value is
 * sent as its JSON.
 */
export function convertPromptArguments(args: Readonly<Record<string, JsonValue>>): Record<string, string> {
  const converted: Record<string, string> = {};
  for (const [key, value] of Object.entries(args)) {
    if (typeof value === "string") converted[key] = value;
    else if (value === null || value === undefined) converted[key] = String(value);
    else converted[key] = JSON.stringify(value);
  }
  return converted;
}

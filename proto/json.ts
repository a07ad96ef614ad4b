/**
 * The one guard for "a parsed JSON value is an object" (not null, not an array), for every
 * reader of JSON from outside: request bodies, tokenizer and config files, perf profiles,
 * planner configs. Lives in proto/ because every folder may import it and it loads nothing.
 */
export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

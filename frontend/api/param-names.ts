/**
 * A codec's request becomes a chat request, and chat validation and the pipeline name chat's
 * fields (`messages`, `max_tokens`, `response_format`, `tools[0].function.parameters`). A client
 * of another API sent other fields, so each codec has one table from chat's names to its own,
 * and every error it answers — from its parse, from chat validation, from the pipeline (context
 * length, output grammar, chat template) — goes through `renameParams` once, in the handler.
 *
 * A table entry is keyed by a chat field (the first segment of a path): a string replaces that
 * segment and keeps the rest of the path (`max_tokens` → `max_output_tokens`); a function gets
 * the rest (`[0].function.parameters`) and returns the whole new path, for APIs whose nesting
 * differs or whose list indexes do not carry over. Quoted field names in the message
 * (`'max_tokens' must be…`) are renamed the same way. Names the table does not list are the
 * API's own and stay as they are, so renaming is safe on errors the codec raised itself.
 */
import { ApiError } from '../errors.js';

export type ParamNames = Readonly<Record<string, string | ((rest: string) => string)>>;

/** A field path: a name, then `.name` or `[n]` segments. */
const PATH = /^([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)/;
/** The same, quoted in a message: `'tools[0].function.parameters'`. */
const QUOTED_PATH = /'([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)/g;

function renamed(names: ParamNames, field: string, rest: string): string | undefined {
  if (!Object.hasOwn(names, field)) return undefined;
  const to = names[field]!;
  return typeof to === 'string' ? to + rest : to(rest);
}

/** One path in this API's names; unchanged when the table does not list its first segment. */
export function renameParam(names: ParamNames, param: string): string {
  const m = PATH.exec(param);
  if (!m) return param;
  const to = renamed(names, m[1]!, m[2]!);
  return to === undefined ? param : to + param.slice(m[0].length);
}

/** `err` with its `param` and the field names quoted in its message in this API's names (the same error when nothing changes). */
export function renameParams(err: ApiError, names: ParamNames | undefined): ApiError {
  if (names === undefined) return err;
  const param = err.param === null ? null : renameParam(names, err.param);
  const message = err.message.replace(QUOTED_PATH, (whole, field: string, rest: string) => {
    const to = renamed(names, field, rest);
    return to === undefined ? whole : `'${to}`;
  });
  if (param === err.param && message === err.message) return err;
  return new ApiError(err.code, message, param, err.cause !== undefined ? { cause: err.cause } : undefined);
}

/**
 * Rules between a command's flags (one that needs another, one that only means something with
 * another), as data. A command checks its parsed flags against its table before it starts
 * anything; a parent that passes flags on (`runtime up`) checks the child's parsed flags against
 * the child's own table, so the two checks cannot drift. A new rule is one row.
 */
import { ConfigError } from './errors.js';

export interface FlagRule<F> {
  /** True when these flags break the rule. */
  broken: (flags: F) => boolean;
  /** One line: the flags involved and what to do. */
  message: string;
}

/** Throws a ConfigError (one line, exit 2) for the first broken rule; `origin` says where the flags came from. */
export function checkFlagRules<F>(rules: readonly FlagRule<F>[], flags: F, origin?: string): void {
  for (const rule of rules) {
    if (rule.broken(flags)) throw new ConfigError(origin === undefined ? rule.message : `${rule.message} (${origin})`);
  }
}

/**
 * Collects a Grammar's rules while a front end compiles: hands out unique rule names (so two
 * tools' `$defs` or a schema's `$ref` targets never collide) and lets a rule be named before
 * its body exists, which is how recursion (`$ref: "#"`, nested JSON) becomes a reference.
 */
import type { Expr, Grammar } from '../ir.js';

export class RuleSet {
  private readonly rules = new Map<string, Expr | null>();

  /** A fresh name derived from `hint`, reserved until `define` fills it. */
  reserve(hint: string): string {
    const base = hint.replace(/[^A-Za-z0-9_-]+/g, '_').replace(/^_+|_+$/g, '') || 'rule';
    let name = base;
    for (let n = 2; this.rules.has(name); n++) name = `${base}-${n}`;
    this.rules.set(name, null);
    return name;
  }

  define(name: string, expr: Expr): void {
    this.rules.set(name, expr);
  }

  /** reserve + define in one step, for rules that do not refer to themselves. */
  add(hint: string, expr: Expr): string {
    const name = this.reserve(hint);
    this.define(name, expr);
    return name;
  }

  has(name: string): boolean {
    return this.rules.has(name);
  }

  /** Define `name` exactly (no renaming); used by the EBNF front end whose names are the user's. */
  defineExact(name: string, expr: Expr): void {
    this.rules.set(name, expr);
  }

  toGrammar(root: string): Grammar {
    const rules = new Map<string, Expr>();
    for (const [name, expr] of this.rules) {
      if (expr === null) throw new Error(`grammar compiler bug: rule ${name} reserved but never defined`);
      rules.set(name, expr);
    }
    return { root, rules };
  }
}

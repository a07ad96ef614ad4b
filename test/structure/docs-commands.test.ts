/**
 * What the README and docs/ tell a newcomer to run (issue 23 items 9 and 11, issue 34 §3.7): the
 * bench examples write outside the repository, the quick start says why the tiny model's answers
 * are random bytes before anyone runs it, every command to run is `npx runtime …` (a bare
 * `runtime` is not on a newcomer's PATH), and the README's command list has every make-tiny flag.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../cli/main.js';
import { REPO_ROOT } from '../harness/processes.js';

const docs = ['README.md', ...readdirSync(join(REPO_ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** `runtime bench` command lines (with their `\`-continued lines) of a markdown file. */
function benchCommands(text: string): string[] {
  const out: string[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!/runtime bench\b/.test(lines[i]!) || !/^\s*(npx\s+)?runtime bench/.test(lines[i]!.replace(/^\s*\$\s*/, ''))) continue;
    let cmd = lines[i]!;
    while (cmd.trimEnd().endsWith('\\') && i + 1 < lines.length) cmd = `${cmd.trimEnd().slice(0, -1)} ${lines[++i]!.trim()}`;
    out.push(cmd);
  }
  return out;
}

describe('documented commands', () => {
  it('every `runtime bench --out` in the README and docs/ points outside the repository', () => {
    const outs: string[] = [];
    for (const f of docs) {
      for (const cmd of benchCommands(readFileSync(join(REPO_ROOT, f), 'utf8'))) {
        const m = /--out\s+(\S+)/.exec(cmd);
        if (m) outs.push(`${f}: ${m[1]}`);
      }
    }
    expect(outs.length).toBeGreaterThan(2);
    for (const o of outs) expect(o, o).toMatch(/: (\/tmp\/|\$TMPDIR|~\/)|: trace\.jsonl$/);
  });

  it("the quick start says the tiny model's answers are random, and where a real model is served", () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const start = readme.indexOf('--model tiny');
    const nextSection = readme.indexOf('\n## ', start);
    const quickStart = readme.slice(start, nextSection);
    expect(start).toBeGreaterThan(0);
    expect(quickStart).toMatch(/random/);
    expect(quickStart).toMatch(/control characters/);
    expect(quickStart).toContain('docs/real-model.md');
  });

  it('every command to run in the README and docs/ is `npx runtime …`, never a bare `runtime`', () => {
    // docs/design.md names the binary in its contract, it is no how-to.
    const bare: string[] = [];
    for (const f of docs.filter((d) => d !== 'docs/design.md')) {
      let fenced = false;
      readFileSync(join(REPO_ROOT, f), 'utf8').split('\n').forEach((line, i) => {
        if (line.trimStart().startsWith('```')) fenced = !fenced;
        else if (fenced && /(^\s*(\$\s*)?|(&&|;|\||\()\s*)runtime (up|frontend|worker|router|planner|bench|model|profile|backends)\b/.test(line)) bare.push(`${f}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(bare).toEqual([]);
  });

  it("the README's command list names every flag of make-tiny", () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const list = readme.slice(readme.indexOf('## The command line'), readme.indexOf('`npx runtime <command> --help`'));
    const makeTiny = buildProgram().commands.find((c) => c.name() === 'model')!.commands.find((c) => c.name() === 'make-tiny')!;
    const flags = makeTiny.options.map((o) => o.long!).filter((l) => l !== '--help');
    expect(flags).toContain('--lora');
    for (const flag of flags) expect(list, flag).toContain(flag);
  });
});

/**
 * Flag + environment configuration. Every CLI flag `--foo-bar` can also be set from
 * `TANDEM_FOO_BAR`; cluster endpoints come from `ETCD_ENDPOINTS` and `NATS_SERVER`.
 * Parsers throw commander's InvalidArgumentError so a bad value prints a clear message and the
 * CLI exits with code 2 (see cli/main.ts).
 */
import { InvalidArgumentError, type Command } from 'commander';

export function envNameForFlag(longFlag: string): string {
  return `TANDEM_${longFlag.replace(/^--/, '').replace(/^no-/, '').replace(/-/g, '_').toUpperCase()}`;
}

/**
 * Give every option of a command (recursively) its TANDEM_* environment variable. Commander
 * only wires env handling for options that had `.env()` before `addOption`, so the values are
 * applied here in a preAction hook: a flag on the command line wins, then the environment,
 * then the default, and a bad environment value fails like a bad flag (exit 2).
 */
export function bindEnvironment(command: Command): void {
  const visit = (cmd: Command) => {
    for (const option of cmd.options) {
      if (option.long && option.envVar === undefined && option.long !== '--help' && option.long !== '--version') {
        option.env(envNameForFlag(option.long));
      }
      // commander's `.choices()` refuses with "Allowed choices are …": say it as every other parser does.
      if (option.argChoices && !option.variadic) option.argParser(oneOf(option.argChoices));
    }
    cmd.commands.forEach(visit);
  };
  visit(command);
  command.hook('preAction', (_root, action) => applyEnvironment(action));
}

/** Set the options of `cmd` not given on its command line from their TANDEM_* variables; a bad value is a usage error (exit 2). */
export function applyEnvironment(cmd: Command, env: NodeJS.ProcessEnv = process.env): void {
  for (const option of cmd.options) {
    const name = option.envVar;
    if (!name || env[name] === undefined) continue;
    const key = option.attributeName();
    const source = cmd.getOptionValueSource(key);
    if (source !== undefined && source !== 'default' && source !== 'implied') continue;
    const raw = env[name]!;
    let value: unknown = raw;
    if (!option.required && !option.optional) {
      // a --no-x flag's attribute is the positive 'x', so TANDEM_X=false turns it off
      value = parseBoolean(raw);
    } else if (option.parseArg) {
      try {
        value = option.parseArg(raw, undefined);
      } catch (err) {
        cmd.error(`error: environment variable ${name} (option '${option.flags}'): ${(err as Error).message}`, { exitCode: 2, code: 'tandem.invalidEnv' });
      }
    } else if (option.argChoices && !option.argChoices.includes(raw)) {
      cmd.error(`error: environment variable ${name}: expected one of ${option.argChoices.join(', ')}, got '${raw}'`, { exitCode: 2, code: 'tandem.invalidEnv' });
    }
    cmd.setOptionValueWithSource(key, value, 'env');
  }
}

function fail(what: string, raw: string): never {
  throw new InvalidArgumentError(`expected ${what}, got '${raw}'`);
}

export function parseInteger(raw: string, min = Number.MIN_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^-?\d+$/.test(raw.trim())) fail('an integer', raw);
  const value = Number(raw);
  if (value < min || value > max) fail(max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`, raw);
  return value;
}

export const intInRange = (min: number, max = Number.MAX_SAFE_INTEGER) => (raw: string) => parseInteger(raw, min, max);
export const positiveInt = intInRange(1);
export const nonNegativeInt = intInRange(0);

export function parseNumber(raw: string, min = -Infinity, max = Infinity): number {
  const value = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(value)) fail('a number', raw);
  if (value < min || value > max) fail(`a number in [${min}, ${max}]`, raw);
  return value;
}

export const numberInRange = (min: number, max = Infinity) => (raw: string) => parseNumber(raw, min, max);

export function oneOf<T extends string>(choices: readonly T[]) {
  return (raw: string): T => {
    if (!(choices as readonly string[]).includes(raw)) fail(`one of ${choices.join(', ')}`, raw);
    return raw as T;
  };
}

export function parsePort(raw: string): number {
  return parseInteger(raw, 0, 65535);
}

export function parseBoolean(raw: string): boolean {
  const t = raw.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(t)) return true;
  if (['0', 'false', 'no', 'off'].includes(t)) return false;
  return fail('a boolean (true/false)', raw);
}

export function etcdEndpointsFromEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const raw = env.ETCD_ENDPOINTS ?? 'http://127.0.0.1:2379';
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => (/^https?:\/\//.test(s) ? s : `http://${s}`));
}

export function natsServerFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  return env.NATS_SERVER ?? 'nats://127.0.0.1:4222';
}

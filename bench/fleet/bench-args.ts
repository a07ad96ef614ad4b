/**
 * The argv of a fleet bench (`--quick`, `--built`, `--name value`), read once: the fleet
 * benchmarks share this instead of each parsing process.argv by hand.
 */
export interface BenchArgs {
  quick: boolean;
  built: boolean;
  /** The value after `--name`, if given. */
  value(name: string): string | undefined;
  /** `--name` as a number, or `fallback`. */
  number(name: string, fallback: number): number;
}

export function benchArgs(args: readonly string[] = process.argv.slice(2)): BenchArgs {
  const value = (name: string): string | undefined => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  return {
    quick: args.includes('--quick'),
    built: args.includes('--built'),
    value,
    number: (name, fallback) => {
      const v = value(name);
      return v !== undefined ? Number(v) : fallback;
    },
  };
}

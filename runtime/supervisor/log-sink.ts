/**
 * Where a child's output lines go. A child has any number of sinks: a file (benches: a fleet
 * under load logs far too much for a console), memory (tests read it back), or the parent's
 * stderr with the child's name in front (`runtime up`, so interleaved logs stay readable).
 */
import { createWriteStream, type WriteStream } from 'node:fs';

export interface LogSink {
  write(line: string): void;
  /** Flush and release; the sink takes no lines after this. */
  close(): Promise<void>;
}

/** The last `maxLines` lines, in order. */
export class MemoryLog implements LogSink {
  private readonly ring: string[] = [];
  private head = 0;

  constructor(readonly maxLines = 1000) {}

  write(line: string): void {
    if (this.ring.length < this.maxLines) this.ring.push(line);
    else {
      this.ring[this.head] = line;
      this.head = (this.head + 1) % this.maxLines;
    }
  }

  lines(): string[] {
    return this.head === 0 ? this.ring.slice() : this.ring.slice(this.head).concat(this.ring.slice(0, this.head));
  }

  text(): string {
    const lines = this.lines();
    return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** Appends to a file (a restarted child keeps writing the same file). */
export class FileLog implements LogSink {
  private readonly stream: WriteStream;

  constructor(readonly path: string) {
    this.stream = createWriteStream(path, { flags: 'a' });
  }

  write(line: string): void {
    this.stream.write(`${line}\n`);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.stream.end(resolve));
  }
}

/** pino's numeric level of a JSON log line; undefined for anything else (stack traces, pretty output). */
export function pinoLevelOf(line: string): number | undefined {
  if (line.charCodeAt(0) !== 123 /* { */) return undefined;
  const m = /"level":(\d+)/.exec(line);
  return m ? Number(m[1]) : undefined;
}

/** `[name] line` on a stream of the parent, stderr by default; JSON lines below `minLevel` are left out. */
export class PrefixedLog implements LogSink {
  constructor(
    readonly prefix: string,
    private readonly out: NodeJS.WritableStream = process.stderr,
    private readonly minLevel = 0,
  ) {}

  write(line: string): void {
    if (this.minLevel > 0) {
      const level = pinoLevelOf(line);
      if (level !== undefined && level < this.minLevel) return;
    }
    this.out.write(`[${this.prefix}] ${line}\n`);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

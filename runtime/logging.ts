/**
 * Process logger: pino JSON lines, pretty-printed when stderr is a TTY (or TANDEM_LOG_FORMAT=pretty).
 * Logs go to stderr so stdout stays free for command output (URLs, tables, JSON).
 */
import pino, { type Logger } from 'pino';

export type { Logger } from 'pino';

export interface LoggerOptions {
  name: string;
  level?: string;
  /** 'json' | 'pretty' | 'auto' (default: pretty on a TTY). */
  format?: string;
}

export function createLogger(options: LoggerOptions): Logger {
  const level = options.level ?? process.env.TANDEM_LOG_LEVEL ?? 'info';
  const format = options.format ?? process.env.TANDEM_LOG_FORMAT ?? 'auto';
  const pretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true);
  if (pretty) {
    return pino({
      name: options.name,
      level,
      transport: { target: 'pino-pretty', options: { destination: 2, colorize: true, translateTime: 'SYS:HH:MM:ss.l' } },
    });
  }
  return pino({ name: options.name, level }, stderrDestination());
}

/** One buffered writer of stderr per process, shared by every logger (pino flushes it on exit). */
let stderr: ReturnType<typeof pino.destination> | undefined;
function stderrDestination(): ReturnType<typeof pino.destination> {
  stderr ??= pino.destination({ fd: 2, sync: false });
  return stderr;
}

/**
 * Nobody reads our stderr any more (the supervisor that held its other end died): drop log
 * lines from now on. Otherwise the flush on exit can retry a write that never completes (EAGAIN
 * on the orphaned socket) and hold the process forever.
 */
export function dropLogOutput(): void {
  if (!stderr) return;
  stderr.write = () => true;
  stderr.flushSync = () => undefined;
  stderr.end = () => undefined;
}

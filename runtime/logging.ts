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
  return pino({ name: options.name, level }, pino.destination({ fd: 2, sync: false }));
}

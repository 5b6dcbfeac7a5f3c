/** The logger the client writes to: `console` fits, and so do pino/winston-style loggers. */
export interface Logger {
  debug?(message: string, ...args: unknown[]): void;
  info?(message: string, ...args: unknown[]): void;
  warn(message: string, ...args: unknown[]): void;
  error(message: string, ...args: unknown[]): void;
}

/** Default: warnings and errors to the console, prefixed; info and debug dropped. */
export const defaultLogger: Logger = {
  warn: (message, ...args) => console.warn(`[loopguard] ${message}`, ...args),
  error: (message, ...args) => console.error(`[loopguard] ${message}`, ...args),
};

/** A logger that never throws (a host's broken logger must not break the client). */
export function safeLogger(logger: Logger): Required<Logger> {
  const call =
    (fn: ((message: string, ...args: unknown[]) => void) | undefined) =>
    (message: string, ...args: unknown[]) => {
      if (!fn) return;
      try {
        fn.call(logger, message, ...args);
      } catch {
        // ignored: logging must not fail the caller
      }
    };
  return {
    debug: call(logger.debug),
    info: call(logger.info),
    warn: call(logger.warn),
    error: call(logger.error),
  };
}

/** Logs at most once per `intervalMs` per key, counting what it held back. */
export class RateLimitedLog {
  private readonly last = new Map<string, { at: number; suppressed: number }>();

  constructor(private readonly intervalMs = 60_000) {}

  /** Returns the number of suppressed messages since the last one logged, or -1 to hold back. */
  allow(key: string, now = Date.now()): number {
    const entry = this.last.get(key);
    if (entry && now - entry.at < this.intervalMs) {
      entry.suppressed++;
      return -1;
    }
    const suppressed = entry?.suppressed ?? 0;
    this.last.set(key, { at: now, suppressed: 0 });
    return suppressed;
  }
}

/**
 * Broker addresses as users have them: `host:port`, or `kafka://host:port` as workers'
 * `LOOPGUARD_BROKER` and `loopguard demo` spell them, several in one string separated by commas
 * or semicolons, or a list; a missing port is Kafka's 9092. The twin of Python's
 * `streams/gateway/connect.py` (`parse_brokers`): a malformed address is refused with one
 * {@link BrokerAddressError} line before anything connects (kafkajs would throw an uncaught
 * "Port should be >= 0 and < 65536" from a socket callback).
 */

export const DEFAULT_KAFKA_PORT = 9092;
const FORMS = 'write host:port or kafka://host:port';

/** A broker address that is not `host:port` or `kafka://host:port`. */
export class BrokerAddressError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = 'BrokerAddressError';
  }
}

/** `host:port` for each address, in order; throws {@link BrokerAddressError}. */
export function parseBrokers(brokers: string | readonly string[] | undefined | null): string[] {
  const items: unknown[] = typeof brokers === 'string' ? [brokers] : Array.isArray(brokers) ? [...brokers] : [];
  const servers: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') throw new BrokerAddressError(`broker address ${String(item)} is not text (${FORMS})`);
    for (const part of item.split(/[,;]/)) {
      if (part.trim()) servers.push(hostPort(part.trim()));
    }
  }
  if (servers.length === 0) throw new BrokerAddressError(`no broker address given (${FORMS})`);
  return servers;
}

/** One address as `host:port` (an IPv6 host in brackets). */
export function hostPort(address: string): string {
  // An address with a user name may hold a password: never echoed.
  const named = address.includes('@') ? 'a broker address' : `broker address '${address}'`;
  let rest = address;
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(address);
  if (scheme) {
    if (scheme[1].toLowerCase() !== 'kafka') throw new BrokerAddressError(`${named}: ${scheme[1]}:// is not kafka:// (${FORMS})`);
    rest = address.slice(scheme[0].length);
  }
  if (rest.includes('@')) throw new BrokerAddressError(`${named}: pass credentials as kafkajs options (${FORMS})`);
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]/?#\s]+)(?::(.*))?$/.exec(rest);
  if (!match) throw new BrokerAddressError(`${named} is not a host and port (${FORMS})`);
  const [, host, port] = match;
  if (port === undefined) return `${host.toLowerCase()}:${DEFAULT_KAFKA_PORT}`;
  const number = /^\d{1,5}$/.test(port) ? Number(port) : NaN;
  if (!(number >= 1 && number <= 65535)) {
    throw new BrokerAddressError(`${named}: the port must be a number from 1 to 65535 (${FORMS})`);
  }
  return `${host.toLowerCase()}:${number}`;
}

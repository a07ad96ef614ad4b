/**
 * String `format`s compiled to the exact subset of text the format validators (ajv-formats,
 * "full" mode) accept. Each is content of a JSON string with no character that needs escaping.
 *
 * - date: YYYY-MM-DD; days 01-28 in every month, 29-30 in every month but February, 31 in the
 *   months that have it. February 29 is never produced (leap years are left out, not guessed).
 * - time: HH:MM:SS, optional .fraction, then `Z` or ±HH:MM (a zone is always written);
 *   seconds 00-59 (no leap second).
 * - date-time: date `T` time.
 * - uuid: 8-4-4-4-12 lowercase hex.
 * - ipv4: dotted quad, each 0-255 without leading zeros.
 * - email: a simplified address: `local@label.label...tld` with local atoms of
 *   [A-Za-z0-9_+-] joined by single dots, labels of [A-Za-z0-9-] not starting or ending with
 *   `-`, and a final label of 2+ letters.
 * Others (uri, hostname, regex, ...) are unsupported: the caller reports the name.
 */
import { type Expr, alt, chars, literal, repeat, seq } from '../ir.js';

const cp = (c: string): number => c.codePointAt(0)!;
const range = (lo: string, hi: string): Expr => chars([cp(lo), cp(hi)]);
const D = range('0', '9');
const HEX = chars([cp('0'), cp('9'), cp('a'), cp('f')]);

const month31 = alt(literal('01'), literal('03'), literal('05'), literal('07'), literal('08'), literal('10'), literal('12'));
const monthNotFeb = alt(literal('01'), seq(literal('0'), range('3', '9')), seq(literal('1'), range('0', '2')));
const anyMonth = alt(seq(literal('0'), range('1', '9')), seq(literal('1'), range('0', '2')));
const day01to28 = alt(seq(literal('0'), range('1', '9')), seq(literal('1'), D), seq(literal('2'), range('0', '8')));

const DATE = seq(
  D,
  D,
  D,
  D,
  literal('-'),
  alt(
    seq(anyMonth, literal('-'), day01to28),
    seq(monthNotFeb, literal('-'), alt(literal('29'), literal('30'))),
    seq(month31, literal('-31')),
  ),
);

const HOUR = alt(seq(range('0', '1'), D), seq(literal('2'), range('0', '3')));
const MIN_SEC = seq(range('0', '5'), D);
const TIME = seq(
  HOUR,
  literal(':'),
  MIN_SEC,
  literal(':'),
  MIN_SEC,
  repeat(seq(literal('.'), repeat(D, 1, 9)), 0, 1),
  alt(literal('Z'), seq(chars([cp('+'), cp('+'), cp('-'), cp('-')]), HOUR, literal(':'), MIN_SEC)),
);

const hexN = (n: number): Expr => repeat(HEX, n, n);
const UUID = seq(hexN(8), literal('-'), hexN(4), literal('-'), hexN(4), literal('-'), hexN(4), literal('-'), hexN(12));

const OCTET = alt(
  seq(literal('25'), range('0', '5')),
  seq(literal('2'), range('0', '4'), D),
  seq(literal('1'), D, D),
  seq(range('1', '9'), D),
  D,
);
const IPV4 = seq(OCTET, literal('.'), OCTET, literal('.'), OCTET, literal('.'), OCTET);

const ATOM_CHAR = chars([cp('+'), cp('+'), cp('-'), cp('-'), cp('0'), cp('9'), cp('A'), cp('Z'), cp('_'), cp('_'), cp('a'), cp('z')]);
const ALNUM = chars([cp('0'), cp('9'), cp('A'), cp('Z'), cp('a'), cp('z')]);
const LABEL_MID = chars([cp('-'), cp('-'), cp('0'), cp('9'), cp('A'), cp('Z'), cp('a'), cp('z')]);
const LABEL = seq(ALNUM, repeat(seq(repeat(LABEL_MID, 0), ALNUM), 0, 1));
const EMAIL = seq(
  repeat(ATOM_CHAR, 1),
  repeat(seq(literal('.'), repeat(ATOM_CHAR, 1)), 0),
  literal('@'),
  repeat(seq(LABEL, literal('.')), 1),
  repeat(chars([cp('A'), cp('Z'), cp('a'), cp('z')]), 2),
);

export const STRING_FORMATS: Readonly<Record<string, Expr>> = {
  date: DATE,
  time: TIME,
  'date-time': seq(DATE, literal('T'), TIME),
  uuid: UUID,
  ipv4: IPV4,
  email: EMAIL,
};

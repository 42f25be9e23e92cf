// Number, money and time formatting, and exact sums of Money amounts.
//
// GraphQL's Money is a decimal string with 9 places: sums are done on BigInt nano-units, so a
// total here is exactly the sum of the amounts the API returned (a float sum would drift).

const NANO_DIGITS = 9;

export function nanos(amount) {
  const text = String(amount).trim();
  const negative = text.startsWith("-");
  const [whole, fraction = ""] = text.replace(/^[-+]/, "").split(".");
  const digits = (whole || "0") + fraction.padEnd(NANO_DIGITS, "0").slice(0, NANO_DIGITS);
  const value = BigInt(digits);
  return negative ? -value : value;
}

export function amountOf(nanoUnits) {
  const negative = nanoUnits < 0n;
  const digits = (negative ? -nanoUnits : nanoUnits).toString().padStart(NANO_DIGITS + 1, "0");
  const whole = digits.slice(0, -NANO_DIGITS);
  return `${negative ? "-" : ""}${whole}.${digits.slice(-NANO_DIGITS)}`;
}

// Sums Money objects per currency: {USD: "123.450000000", …}.
export function sumMoney(monies) {
  const totals = new Map();
  for (const m of monies) {
    if (!m) continue;
    totals.set(m.currency, (totals.get(m.currency) ?? 0n) + nanos(m.amount));
  }
  return new Map([...totals].map(([currency, n]) => [currency, amountOf(n)]));
}

const moneyFormats = new Map();

// "$1,234.57" (exact half-up rounding of the decimal string: Intl formats strings as decimals).
export function money(amount, currency) {
  if (amount === null || amount === undefined) return "—";
  if (currency === "XXX") return "unpriced";
  let format = moneyFormats.get(currency);
  if (!format) {
    format = new Intl.NumberFormat("en-US", {
      style: "currency",
      currency,
      minimumFractionDigits: 2,
      maximumFractionDigits: 2,
      roundingMode: "halfExpand",
    });
    moneyFormats.set(currency, format);
  }
  return format.format(String(amount));
}

const decimals = new Map();

export function number(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  let format = decimals.get(digits);
  if (!format) {
    format = new Intl.NumberFormat("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
    decimals.set(digits, format);
  }
  return format.format(value);
}

export const gpuHours = (value) => (value === null || value === undefined ? "—" : `${number(value, 1)} GPU-h`);
export const pct = (value) => (value === null || value === undefined ? "—" : `${number(value, 1)} %`);

// "2025-09-01 14:00 UTC"
export function utc(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

export function day(iso) {
  return iso ? String(iso).slice(0, 10) : "—";
}

// "3 h ago" relative to now, for last-seen columns.
export function ago(iso, now = Date.now()) {
  if (!iso) return "";
  const seconds = Math.round((now - new Date(iso).getTime()) / 1000);
  if (seconds < 0) return "in the future";
  const steps = [
    [86400, "d"],
    [3600, "h"],
    [60, "min"],
  ];
  for (const [size, unit] of steps) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit} ago`;
  }
  return "just now";
}

// Number, size and shape formatting shared by the panels.

import { toNumber } from "./document.js";

/** Compact number: 4 significant digits, exponent for very small / large magnitudes. */
export function formatNumber(value) {
  const x = toNumber(value);
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return "0";
  const abs = Math.abs(x);
  if (Number.isInteger(x) && abs < 1e9) return String(x);
  if (abs >= 1e5 || abs < 1e-3) return x.toExponential(3);
  return String(Number(x.toPrecision(4)));
}

/** 1536 -> "1.5 KiB". */
export function formatBytes(bytes) {
  const n = toNumber(bytes);
  if (!Number.isFinite(n) || n < 0) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value >= 100 ? 0 : 1)} ${units[unit]}`;
}

/** "float32[4, 16]" from a Tensor / SavedTensor record. */
export function shapeText(tensor) {
  if (!tensor) return "";
  const shape = Array.isArray(tensor.shape) ? `[${tensor.shape.map(String).join(", ")}]` : "";
  return `${tensor.dtype ?? ""}${shape}`;
}

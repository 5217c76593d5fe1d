// Loops over data-sized arrays. `out.push(...xs)` and `Math.max(...xs)` pass every element
// as a call argument, which overflows the stack ("Maximum call stack size exceeded") once
// a document holds a few hundred thousand ops or tensors (issue 9).

/** Append every item of `items` to `out`; returns `out`. */
export function pushAll(out, items) {
  for (const item of items) out.push(item);
  return out;
}

/** The largest of `values` (any iterable of numbers), or `floor` when it is larger or `values` is empty. */
export function maxOf(values, floor = -Infinity) {
  let max = floor;
  for (const v of values) if (v > max) max = v;
  return max;
}

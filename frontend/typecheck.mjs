// tsc's checkJs over src/ (jsconfig.json), against a baseline: the errors listed in
// typecheck-baseline.txt (file, code and message; not line numbers, which move) are known and
// still to fix; any other error fails. A listed one that is gone is reported, to delete its line
// (not a failure: whoever fixes a type error need not know of this list).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = resolve(here, "node_modules/typescript/bin/tsc");
let output = "";
try {
  execFileSync(process.execPath, [tsc, "-p", "jsconfig.json", "--pretty", "false"], { cwd: here, encoding: "utf8" });
} catch (err) {
  output = String(err.stdout); // tsc exits non-zero when it reports errors
}
const ERROR = /^(.+?)\(\d+,\d+\): error (TS\d+): (.*)$/;
// A message is cut before the type it names: an inline object type changes with every option.
const found = output
  .split("\n")
  .map((line) => ERROR.exec(line))
  .filter(Boolean)
  .map((m) => `${m[1]} ${m[2]} ${m[3].replace(/ type '.*$/, " type ...")}`);
const known = readFileSync(resolve(here, "typecheck-baseline.txt"), "utf8")
  .split("\n")
  .filter((line) => line.trim() && !line.startsWith("#"));
const left = [...known];
const fresh = [];
for (const error of found) {
  const i = left.indexOf(error);
  if (i >= 0) left.splice(i, 1);
  else fresh.push(error);
}
if (found.length === 0 && output.trim()) fresh.push(output.trim()); // tsc failed another way
for (const error of fresh) console.error(`new type error: ${error}`);
for (const error of left) console.error(`fixed, delete from typecheck-baseline.txt: ${error}`);
console.log(`tsc checkJs: ${found.length - fresh.length} known (typecheck-baseline.txt), ${fresh.length} new, ${left.length} fixed`);
process.exit(fresh.length ? 1 : 0);

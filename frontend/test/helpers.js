// Shared test helpers: a fresh copy of the hand-written fixture for every test.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { indexDocument } from "../src/document.js";

const FIXTURE = fileURLToPath(new URL("./fixtures/mlp.tvz.json", import.meta.url));

export const loadFixture = () => JSON.parse(readFileSync(FIXTURE, "utf8"));
export const fixtureIndex = () => indexDocument(loadFixture());

// Validate a Continue config.yaml with @continuedev/config-yaml: schema parse, then its own
// validateConfigYaml (which reports contextLength - maxTokens < 1000 and similar as errors/warnings).
// Usage: node continue_yaml.mjs <file>; prints JSON {errors, warnings}; exit 1 if any error or warning.
import { readFileSync } from "node:fs";
import { load } from "./_load.mjs";

const cy = await load("@continuedev/config-yaml");
const text = readFileSync(process.argv[2], "utf8");
let config;
try {
  config = cy.parseConfigYaml(text);
} catch (err) {
  console.error(String(err && err.message ? err.message : err));
  process.exit(1);
}
const problems = cy.validateConfigYaml(config) || [];
const errors = problems.filter((p) => p.fatal);
const warnings = problems.filter((p) => !p.fatal);
console.log(JSON.stringify({ errors, warnings }));
process.exit(problems.length ? 1 : 0);

// Validate Continue config.yaml files with @continuedev/config-yaml: its parser, then its own
// validateConfigYaml (which also reports contextLength - maxTokens < 1000).
// Usage: node continue_yaml.mjs <file>...; prints a JSON list of {file, ok, issues}.
import { readFileSync } from "node:fs";
import { load } from "./_load.mjs";

const cy = await load("@continuedev/config-yaml");
const results = process.argv.slice(2).map((file) => {
  try {
    const problems = cy.validateConfigYaml(cy.parseConfigYaml(readFileSync(file, "utf8"))) || [];
    return { file, ok: problems.length === 0, issues: problems };
  } catch (err) {
    return { file, ok: false, issues: [{ fatal: true, message: String(err && err.message ? err.message : err) }] };
  }
});
console.log(JSON.stringify(results));

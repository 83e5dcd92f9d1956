// Validate Cline SDK providers.json files with @cline/core's StoredProviderSettingsSchema.
// Usage: node cline_providers.mjs <file>...; prints a JSON list of {file, ok, issues}.
import { readFileSync } from "node:fs";
import { load } from "./_load.mjs";

const core = await load("@cline/core");
const results = process.argv.slice(2).map((file) => {
  const result = core.StoredProviderSettingsSchema.safeParse(JSON.parse(readFileSync(file, "utf8")));
  return { file, ok: result.success, issues: result.success ? [] : result.error.issues };
});
console.log(JSON.stringify(results));

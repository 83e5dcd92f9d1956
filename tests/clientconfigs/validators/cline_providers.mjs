// Validate a Cline SDK providers.json with @cline/core's StoredProviderSettingsSchema.
// Usage: node cline_providers.mjs <file>; exit 0 and "ok" when valid, exit 1 with the issues otherwise.
import { readFileSync } from "node:fs";
import { load } from "./_load.mjs";

const core = await load("@cline/core");
const data = JSON.parse(readFileSync(process.argv[2], "utf8"));
const result = core.StoredProviderSettingsSchema.safeParse(data);
if (!result.success) {
  console.error(JSON.stringify(result.error.issues, null, 2));
  process.exit(1);
}
console.log("ok");

// Load an npm package from $PORTAL_NODE_VALIDATORS (where .ci/run installs package.json's deps).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export async function load(name) {
  const root = process.env.PORTAL_NODE_VALIDATORS;
  if (!root) throw new Error("PORTAL_NODE_VALIDATORS is not set");
  const dir = join(root, "node_modules", name);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  let entry = pkg.main || "index.js";
  const dot = pkg.exports && (pkg.exports["."] ?? pkg.exports);
  if (typeof dot === "string") entry = dot;
  else if (dot) entry = dot.node || dot.import || dot.default || entry;
  return import(pathToFileURL(join(dir, entry)).href);
}

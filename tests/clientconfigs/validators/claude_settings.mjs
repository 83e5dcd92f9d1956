// Type-check Claude Code settings.json files against SchemaStore's claude-code-settings, as published
// on npm (@schemastore/claude-code-settings: TypeScript types generated from the SchemaStore schema).
// An object literal typed as ClaudeCodeSettings fails on unknown top-level keys, wrong value types and
// non-string env values. Usage: node claude_settings.mjs <file>...; prints [{file, ok, issues}].
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { load } from "./_load.mjs";

const mod = await load("typescript");
const ts = mod.default ?? mod;
const types = join(process.env.PORTAL_NODE_VALIDATORS, "node_modules", "@schemastore", "claude-code-settings", "index");
const work = mkdtempSync(join(tmpdir(), "claude-settings-"));
const options = {
  strict: true, noEmit: true, skipLibCheck: true, types: [],
  target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler,
};
const results = process.argv.slice(2).map((file, i) => {
  const json = readFileSync(file, "utf8");
  const check = join(work, `check${i}.ts`);
  writeFileSync(check, `import type { ClaudeCodeSettings } from ${JSON.stringify(types)};\n` +
    `export const settings: ClaudeCodeSettings = ${json};\n`);
  const program = ts.createProgram([check], options);
  const issues = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  return { file, ok: issues.length === 0, issues };
});
console.log(JSON.stringify(results));

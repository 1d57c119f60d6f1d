// npm's "prepare" script: builds dist/ (`npm run build`) wherever this package is installed from
// its source, so that `npm install ./sdk/typescript` works on a fresh checkout. npm runs a
// linked folder's "prepare" but installs no devDependencies for it, so the compiler (pinned by
// package-lock.json) is installed here first when it is missing.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const npm = (...args) => {
  // A parent `npm install` passes its settings down as npm_config_*; --global, --omit=dev or
  // --prefix of the app would send this install elsewhere or leave the compiler out.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) =>
    !/^npm_config_(global|location|prefix|omit|include|production|only|dev|save.*)$/i.test(k)));
  execFileSync("npm", args, { cwd: root, env, stdio: ["ignore", "inherit", "inherit"] });
};

if (!existsSync(new URL("../node_modules/typescript/package.json", import.meta.url))) {
  npm("ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error");
}
npm("run", "--silent", "build");

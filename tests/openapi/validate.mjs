// Validates api/openapi.yaml with two independent validators, both pinned by package-lock.json:
//   - Redocly CLI `lint` with redocly.yaml (the structural rules and the spec rules as errors;
//     what is off and why is said there), and .redocly.lint-ignore.yaml (one known exception);
//   - @apidevtools/swagger-parser `validate` (the OpenAPI 3.0 JSON Schema, then its own checks).
// First a self-check: a copy of the file with a planted slip (the unquoted ", " in a flow mapping
// that once broke it) must be refused by both, so a validator that checks nothing fails here.
// Prints "ok   ..." / "FAIL ..." per check and a last line "N passed, M failed"; exits 1 on any
// failure, 2 when node_modules is missing or not what package-lock.json pins.
//
//   cd tests/openapi && npm ci && node validate.mjs [path/to/openapi.yaml]
import {spawnSync} from 'node:child_process';
import {existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {dirname, join, resolve} from 'node:path';
import {fileURLToPath} from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const SPEC = resolve(process.argv[2] ?? join(HERE, '..', '..', 'api', 'openapi.yaml'));
const CONFIG = join(HERE, 'redocly.yaml');
const INSTALL = 'cd tests/openapi && npm ci';

// The pinned validators must be what is installed: a stale node_modules would check with other
// rules than the lock file says.
function installedVersion(name) {
  const file = join(HERE, 'node_modules', name, 'package.json');
  return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')).version : null;
}
const pinned = JSON.parse(readFileSync(join(HERE, 'package.json'), 'utf8')).dependencies;
for (const name of ['@redocly/cli', '@apidevtools/swagger-parser']) {
  const have = installedVersion(name);
  if (have !== pinned[name]) {
    console.error(
        `${name} ${pinned[name]} is ${have ? `not installed (found ${have})` : 'not installed'}` +
        ` in ${join(HERE, 'node_modules')}; install the pinned validators with: ${INSTALL}`);
    process.exit(2);
  }
}
const {default: SwaggerParser} = await import('@apidevtools/swagger-parser');
const REDOCLY = join(HERE, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js');

// Redocly CLI on `file`: {ok, out}. No telemetry, no update check (tests run offline).
function redocly(file) {
  const p = spawnSync(
      process.execPath, [REDOCLY, 'lint', file, '--config', CONFIG, '--format', 'stylish'], {
        cwd: HERE,
        encoding: 'utf8',
        env: {...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
              NO_COLOR: '1', FORCE_COLOR: '0'},
        timeout: 120000,
      });
  return {ok: p.status === 0, out: `${p.stdout ?? ''}${p.stderr ?? ''}${p.error ?? ''}`};
}

// swagger-parser on `file`: {ok, out}. validate() dereferences, so each call gets a fresh parse.
async function swaggerParser(file) {
  try {
    const api = await SwaggerParser.validate(file);
    return {ok: true, out: `${api.info.title} ${api.info.version}: valid OpenAPI ${api.openapi}`};
  } catch (e) {
    return {ok: false, out: e.message};
  }
}

let passed = 0, failed = 0;
function check(name, ok, detail) {
  if (ok) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}`);
  }
  if (detail && (!ok || process.env.VERBOSE)) console.log(detail.replace(/^/gm, '     '));
}

// The self-check.
const text = readFileSync(SPEC, 'utf8');
const slip = "'204': {description: Signalled}";
const tmp = mkdtempSync(join(tmpdir(), 'space-openapi-'));
try {
  if (!text.includes(slip)) {
    check(`self-check: ${SPEC} still has ${slip} to plant a slip into`, false);
  } else {
    const broken = join(tmp, 'openapi.yaml');
    writeFileSync(broken, text.replace(slip, "'204': {description: Signalled, or not}"));
    const r = redocly(broken);
    check('self-check: redocly refuses an unquoted ", " in a flow mapping',
          !r.ok && /struct/.test(r.out), r.out);
    const s = await swaggerParser(broken);
    check('self-check: swagger-parser refuses it too', !s.ok, s.out);
  }
} finally {
  rmSync(tmp, {recursive: true, force: true});
}

// The file itself.
const r = redocly(SPEC);
check(`redocly ${pinned['@redocly/cli']} lint (redocly.yaml): ${SPEC}`, r.ok, r.out);
const s = await swaggerParser(SPEC);
check(`swagger-parser ${pinned['@apidevtools/swagger-parser']} validate: ${SPEC}`, s.ok, s.out);

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

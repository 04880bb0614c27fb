// Runs an MCP server installed in this image (upstreams' `npm:`), after checking it is the
// pinned version: `node run.mjs <package>@<version> [args...]`. With `--check` first, only
// checks (exit 0, or 78 with the reason): what `toolgate doctor` asks.
import { readFileSync } from 'node:fs';
import process from 'node:process';
import { pathToFileURL } from 'node:url';

const argv = process.argv.slice(2);
const check = argv[0] === '--check';
const [spec = '', ...args] = check ? argv.slice(1) : argv;
const at = spec.lastIndexOf('@');
const name = at > 0 ? spec.slice(0, at) : spec;
const version = at > 0 ? spec.slice(at + 1) : '';
const dir = `/opt/toolgate/mcp/node_modules/${name}`;

function fail(why) {
  process.stderr.write(
    `toolgate: npm server ${spec}: ${why}; add it to SANDBOX_NPM_SERVERS and run scripts/sandbox/build-images.sh\n`,
  );
  process.exit(78);
}

let pkg;
try {
  pkg = JSON.parse(readFileSync(`${dir}/package.json`, 'utf8'));
} catch {
  fail('not installed in this image');
}
if (pkg.version !== version) fail(`this image has version ${pkg.version}`);
const bin = typeof pkg.bin === 'string' ? pkg.bin : Object.values(pkg.bin ?? {})[0];
if (typeof bin !== 'string') fail('the package names no program (bin)');
if (check) {
  process.stdout.write(`${name}@${pkg.version}\n`);
  process.exit(0);
}
// As if the server were run directly: its argv is its own program and the upstream's args.
process.argv = [process.argv[0], `${dir}/${bin}`, ...args];
await import(pathToFileURL(`${dir}/${bin}`).href);

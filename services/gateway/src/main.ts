import { runService } from '@toolgate/lifecycle';
import { loadToolRegistry } from '@toolgate/plugins';
import { createGateway } from './gateway.js';

runService('toolgate-gateway', async (config, logger) => {
  const registry = await loadToolRegistry(
    config.plugins.dirs,
    logger.child({ component: 'plugins' }),
  );
  const gateway = createGateway({ config, registry, logger });
  const { host, port } = await gateway.listen();
  const base = `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host}:${port}`;
  if (gateway.dev) {
    // Printed once, to the terminal only: the development-mode admin key.
    console.log(
      [
        '',
        'toolgate is running in development mode (no clients configured; loopback only).',
        `  Point your assistant at: ${base}`,
        `  Development admin key:   ${gateway.dev.key}`,
        `  Try: curl -s -H "Authorization: Bearer ${gateway.dev.key}" ${base}/tools/openai`,
        '',
      ].join('\n'),
    );
  }
  return () => gateway.close();
});

import { runService } from '@toolgate/lifecycle';
import { startGateway } from './start.js';

runService('toolgate-gateway', startGateway);

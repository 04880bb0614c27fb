import { runService } from '@toolgate/lifecycle';
import { startWorker } from './start.js';

runService('toolgate-worker', startWorker);

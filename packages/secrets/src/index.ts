export { KeyRing, parseKey } from './keyring.js';
export {
  SecretStore,
  SECRET_NAME,
  MAX_SECRET_BYTES,
  MAX_SECRETS_PER_OWNER,
  MAX_USER_CHARS,
  checkSecretName,
  checkUser,
} from './store.js';
export { CredentialRules, CallSecrets, credentialMissing } from './credentials.js';
export { SecretError, SecretConfigError } from './errors.js';

export type { SecretKeySources } from './keyring.js';
export type { SecretListing } from './store.js';
export type { CredentialRule } from './credentials.js';
export type { SecretErrorCode } from './errors.js';

/**
 * The egress proxy's certificate authority, made fresh by each worker at start and kept only in
 * its memory: it signs a certificate for a host the moment a sandbox opens HTTPS to a host
 * that has a credential rule, so the proxy can read the request and add the header. Only
 * sandboxes trust it (their CA bundle); nothing else ever sees a certificate it signed, and it
 * dies with the worker. Keys come from node:crypto (fast, native); node-forge only writes the
 * X.509 structures.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import forge from 'node-forge';

/** Certificates cached (one per host name seen); the oldest goes past this many. */
const MAX_CACHED = 1024;
const DAY_MS = 24 * 60 * 60 * 1000;

function rsaKeys(): { privatePem: string; publicPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    privatePem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

/** A positive random serial (RFC 5280: at most 20 octets, positive). */
function serial(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f;
  return bytes.toString('hex');
}

export class EgressCa {
  /** The CA certificate (PEM): what sandboxes trust. */
  readonly certPem: string;
  /**
   * What a sandbox's TLS clients trust: the public roots Node ships (Mozilla's list) and this
   * CA, so HTTPS that is tunnelled untouched still verifies as before.
   */
  readonly bundlePem: string;
  private readonly caKey: forge.pki.rsa.PrivateKey;
  private readonly caCert: forge.pki.Certificate;
  /** One key for every host certificate: only the proxy holds it, like the CA's. */
  private readonly leafKeyPem: string;
  private readonly leafPublic: forge.pki.rsa.PublicKey;
  private readonly contexts = new Map<string, SecureContext>();

  constructor(name = 'toolgate egress CA') {
    const ca = rsaKeys();
    this.caKey = forge.pki.privateKeyFromPem(ca.privatePem) as forge.pki.rsa.PrivateKey;
    const cert = forge.pki.createCertificate();
    cert.publicKey = forge.pki.publicKeyFromPem(ca.publicPem);
    cert.serialNumber = serial();
    const now = Date.now();
    cert.validity.notBefore = new Date(now - DAY_MS);
    // Long enough for any worker's life; the key never leaves this process.
    cert.validity.notAfter = new Date(now + 365 * DAY_MS);
    const subject = [
      { name: 'commonName', value: `${name} ${randomBytes(4).toString('hex')}` },
      { name: 'organizationName', value: 'toolgate' },
    ];
    cert.setSubject(subject);
    cert.setIssuer(subject);
    cert.setExtensions([
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ]);
    cert.sign(this.caKey, forge.md.sha256.create());
    this.caCert = cert;
    this.certPem = forge.pki.certificateToPem(cert);
    this.bundlePem = `${[...rootCertificates, this.certPem.trim()].join('\n')}\n`;
    const leaf = rsaKeys();
    this.leafKeyPem = leaf.privatePem;
    this.leafPublic = forge.pki.publicKeyFromPem(leaf.publicPem);
  }

  /** The TLS context the proxy answers a sandbox with for `host` (a name or an IP address). */
  contextFor(host: string): SecureContext {
    const name = host.toLowerCase();
    const cached = this.contexts.get(name);
    if (cached) return cached;
    const context = createSecureContext({ key: this.leafKeyPem, cert: this.issue(name) });
    if (this.contexts.size >= MAX_CACHED) {
      this.contexts.delete(this.contexts.keys().next().value!);
    }
    this.contexts.set(name, context);
    return context;
  }

  private issue(host: string): string {
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.leafPublic;
    cert.serialNumber = serial();
    const now = Date.now();
    cert.validity.notBefore = new Date(now - DAY_MS);
    cert.validity.notAfter = new Date(now + 30 * DAY_MS);
    cert.setSubject([{ name: 'commonName', value: host.slice(0, 64) }]);
    cert.setIssuer(this.caCert.subject.attributes);
    const ip = /^[0-9.]+$/.test(host) || host.includes(':');
    cert.setExtensions([
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [ip ? { type: 7, ip: host.replace(/^\[|\]$/g, '') } : { type: 2, value: host }],
      },
    ]);
    cert.sign(this.caKey, forge.md.sha256.create());
    return forge.pki.certificateToPem(cert);
  }
}

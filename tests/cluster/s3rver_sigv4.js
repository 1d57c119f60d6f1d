// s3rver (an S3-compatible server for tests) with the one check it lacks: it takes any
// well-formed AWS Signature V4 header without verifying it, so this puts a verifier in front
// of it that recomputes every request's signature independently (node's crypto, from AWS's
// SigV4 specification) for the key pair S3RVER / S3RVER and answers 403
// SignatureDoesNotMatch to a request whose signature differs (or that is unsigned).
// The payload hash is taken from x-amz-content-sha256 as signed; the body is checked against
// it as well, for PUTs, before s3rver stores it.
//
// Usage: node --openssl-legacy-provider s3rver_sigv4.js DATA_DIR BUCKET
// (prints "S3rver listening on 127.0.0.1:PORT"). The flag: s3rver encrypts its ListObjectsV2
// continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
'use strict';

const crypto = require('crypto');
const S3rver = require('s3rver');

const SECRETS = { S3RVER: 'S3RVER' };

function rfc3986(s) {
  return encodeURIComponent(s).replace(
    /[!'()*]/g,
    (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase(),
  );
}

function hmac(key, data) {
  return crypto.createHmac('sha256', key).update(data).digest();
}

function sha256(data) {
  return crypto.createHash('sha256').update(data).digest('hex');
}

// The reason a request's signature is wrong, or null if it is right.
function check(req) {
  const auth = req.headers['authorization'] || '';
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(
    auth,
  );
  if (!m) return 'no well-formed SigV4 Authorization header';
  const [, keyId, date, region, service, signedHeaders, given] = m;
  const secret = SECRETS[keyId];
  if (!secret) return 'unknown access key ' + keyId;
  const amzDate = req.headers['x-amz-date'] || '';
  if (!amzDate.startsWith(date)) return 'x-amz-date does not match the credential scope';
  const names = signedHeaders.split(';');
  if (!names.includes('host') || !names.includes('x-amz-date'))
    return 'host and x-amz-date must be signed';
  const [rawPath, rawQuery = ''] = req.url.split('?', 2);
  const query = rawQuery
    .split('&')
    .filter((p) => p.length > 0)
    .map((p) => {
      const eq = p.indexOf('=');
      const k = eq < 0 ? p : p.slice(0, eq);
      const v = eq < 0 ? '' : p.slice(eq + 1);
      return [rfc3986(decodeURIComponent(k)), rfc3986(decodeURIComponent(v))];
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => k + '=' + v)
    .join('&');
  const headers = names
    .map((n) => n + ':' + String(req.headers[n] || '').trim().replace(/\s+/g, ' ') + '\n')
    .join('');
  const payload = req.headers['x-amz-content-sha256'] || '';
  const canonical = [req.method, rawPath, query, headers, signedHeaders, payload].join('\n');
  const scope = `${date}/${region}/${service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256(canonical)].join('\n');
  let key = hmac('AWS4' + secret, date);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, 'aws4_request');
  const expected = hmac(key, toSign).toString('hex');
  if (expected !== given) return 'signature mismatch; canonical request was:\n' + canonical;
  return null;
}

function refuse(ctx, why) {
  console.error('SIGV4 REFUSED ' + ctx.method + ' ' + ctx.url + ': ' + why);
  ctx.status = 403;
  ctx.type = 'application/xml';
  ctx.body =
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code>' +
    '<Message>The request signature we calculated does not match the signature you ' +
    'provided.</Message></Error>';
}

async function main() {
  const [dir, bucket] = process.argv.slice(2);
  const server = new S3rver({
    directory: dir,
    address: '127.0.0.1',
    port: 0,
    silent: true,
    configureBuckets: [{ name: bucket, configs: [] }],
  });
  server.middleware.unshift(async (ctx, next) => {
    const why = check(ctx.req);
    if (why) return refuse(ctx, why);
    if (ctx.method === 'PUT') {
      // Read the body here to check its hash, then hand s3rver a stream of the same bytes.
      const chunks = [];
      for await (const c of ctx.req) chunks.push(c);
      const body = Buffer.concat(chunks);
      if (sha256(body) !== ctx.req.headers['x-amz-content-sha256'])
        return refuse(ctx, 'the body does not match x-amz-content-sha256');
      ctx.req = require('stream').Readable.from([body], { objectMode: false });
    }
    return next();
  });
  const { address, port } = await server.run();
  console.log('S3rver listening on %s:%d', address, port);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

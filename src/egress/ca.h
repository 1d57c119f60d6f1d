// A per-sandbox certificate authority for TLS interception. Each sandbox gets its own CA (an
// ECDSA P-256 key, CA:TRUE, pathlen 0, name constrained to nothing else); its certificate is
// installed in the sandbox's trust store; its key stays in the daemon. When the gateway has to
// terminate TLS for a host (to add a credential, or to enforce method/path rules), it mints a
// leaf certificate for that host signed by the sandbox's CA, cached for reuse. A CA of one
// sandbox means nothing to any other sandbox or to the host.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "tls/x509.h"

namespace space::egress {

using tls::KeyCert;
// server_context(kc): a TLS server context presenting a leaf (TLS 1.2+, ALPN http/1.1 only).
using tls::server_context;

class SandboxCa {
 public:
  // A fresh CA for sandbox `id`: subject "CN=SPACE sandbox <id> CA, O=SPACE", valid from one
  // hour ago for `lifetime`, serial random 128-bit.
  static Result<std::unique_ptr<SandboxCa>> create(const std::string& sandbox_id,
                                                   std::chrono::seconds lifetime);
  // Saves key (PKCS#8 PEM, mode 0600) and certificate (PEM) to `dir`/ca.key and `dir`/ca.crt,
  // written to a temporary name then renamed; loads them back (after a daemon restart).
  Result<void> save(const std::filesystem::path& dir) const;
  static Result<std::unique_ptr<SandboxCa>> load(const std::filesystem::path& dir);

  // The same from PEM text: how spaced hands a sandbox's CA to the gateway process.
  static Result<std::unique_ptr<SandboxCa>> from_pem(std::string key_pem,
                                                     const std::string& cert_pem);
  std::string key_pem() const;  // PKCS#8; the caller cleanses it after use

  std::string cert_pem() const;  // what goes into the sandbox's trust store
  const KeyCert& ca() const { return ca_; }

  // A leaf for `host` (a normalized DNS name, or an IP address in text form): subjectAltName
  // DNS:<host> or IP:<addr>, CN=<host> (names over 64 bytes get no CN), serverAuth EKU,
  // digitalSignature key usage, a fresh P-256 key, valid from one hour ago until the CA
  // expires. Cached per host (thread-safe).
  Result<KeyCert> leaf(const std::string& host);

 private:
  KeyCert ca_;
  std::mutex mu_;
  std::map<std::string, KeyCert> leaves_;
};

}  // namespace space::egress

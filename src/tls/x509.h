// Certificates and keys with OpenSSL 3, shared by the egress gateway's per-sandbox CAs
// (egress/ca.h) and spaced's own API certificates (tls/api_certs.h): EC P-256 keys, X.509 v3
// certificates built field by field, PEM files read and written safely, and the TLS server
// context that presents a key + certificate. Every OpenSSL object is owned (unique_ptr, or
// shared_ptr once handed out) so no error path leaks; every OpenSSL failure becomes an Error
// carrying OpenSSL's own error strings. subjectAltNames are built as structures, never through
// OpenSSL's "DNS:..." config syntax, so a name can never smuggle in a second one.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::tls {

template <auto F>
struct Free {
  template <class T>
  void operator()(T* p) const {
    F(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Free<X509_free>>;
using SslPtr = std::unique_ptr<SSL, Free<SSL_free>>;
using CtxPtr = std::unique_ptr<SSL_CTX, Free<SSL_CTX_free>>;

// An owned key + certificate pair (EVP_PKEY, X509), moved around as one value; `chain` holds
// the intermediate certificates a server sends after its own (given certificate files).
struct KeyCert {
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
  std::vector<std::shared_ptr<X509>> chain;
};

// An Error for a failed OpenSSL call, with (and clearing) OpenSSL's error queue.
Error ossl_error(std::string_view what, Code code = Code::kInternal);
inline std::unexpected<Error> fail_ossl(std::string_view what, Code code = Code::kInternal) {
  return std::unexpected(ossl_error(what, code));
}

[[nodiscard]] Result<PkeyPtr> new_p256_key();
// A v3 certificate with a random positive 128-bit serial, `key`'s public key and notBefore one
// hour before `now`; the caller sets names, notAfter and extensions, then signs.
[[nodiscard]] Result<X509Ptr> new_cert(EVP_PKEY* key, time_t now);
[[nodiscard]] Result<void> add_name_entry(X509_NAME* name, const char* field,
                                          const std::string& value);
// Adds an extension given in OpenSSL's config syntax; only ever called with constant values.
[[nodiscard]] Result<void> add_ext(X509* cert, X509* issuer, int nid, const char* value);
// subjectAltName with `names`: IP:<addr> for each address, DNS:<name> for the others (which
// must be normalized DNS names).
[[nodiscard]] Result<void> add_subject_alt_names(X509* cert, const std::vector<std::string>& names,
                                                 bool critical);
// The names in a certificate's subjectAltName (addresses in inet_ntop form), in its order.
std::vector<std::string> subject_alt_names(X509* cert);
[[nodiscard]] Result<void> sign(X509* cert, EVP_PKEY* key);

// A normalized DNS name: lower-case LDH labels (underscore tolerated, as some hosts use it),
// 1..63 bytes each, at most 253 in all, no trailing dot, no wildcard.
bool is_normalized_dns_name(std::string_view host);
// An IPv4 or IPv6 address in text form.
bool is_ip_address(const std::string& host);

// PEM text of a certificate, of a private key (PKCS#8); "" on failure.
std::string cert_pem(X509* cert);
std::string key_pem(EVP_PKEY* key);
// Parses PEM text: the key (never prompting for a passphrase: an encrypted key is an error);
// every certificate in order (at least one).
[[nodiscard]] Result<PkeyPtr> parse_key_pem(std::string pem);
[[nodiscard]] Result<std::vector<std::shared_ptr<X509>>> parse_certs_pem(const std::string& pem);

// Writes `data` to `path` atomically: a temporary file with `mode`, then rename. Not fsync'ed.
[[nodiscard]] Result<void> write_file_atomic(const std::filesystem::path& path,
                                             std::string_view data, mode_t mode);
// Reads a small (at most 64 KiB) regular file, not following a symlink in its last component
// unless `follow`. With `private_file`, refuses one that others can read, or its group unless
// `own_group_ok` and that group is one of this process's.
[[nodiscard]] Result<std::string> read_small_file(const std::filesystem::path& path,
                                                  bool private_file, bool follow = false,
                                                  bool own_group_ok = false);

// A TLS server context presenting `kc` (and its chain): TLS 1.2 at least (1.3 preferred, as
// OpenSSL does), no renegotiation, no compression, ALPN http/1.1 only. Returned owned.
// With `client_ca` (a PEM file of one or more CA certificates), mutual TLS: every client must
// present a certificate that chains to one of them, or the handshake fails.
[[nodiscard]] Result<std::shared_ptr<SSL_CTX>> server_context(
    const KeyCert& kc, const std::filesystem::path& client_ca = {});

// Time left before `cert` expires (negative once it has).
std::chrono::seconds time_left(X509* cert, time_t now);

}  // namespace space::tls

// SHA-256 and HMAC-SHA256 over OpenSSL, raw or in lowercase hex (common/hex.h): token secret
// hashes, chunk ids, sealed snapshot manifests, the audit chain, AWS SigV4. Header-only, so a
// library that links only OpenSSL's libcrypto (the snapshot store) can use it too. Hashing
// bytes in memory cannot fail short of a broken libcrypto, which aborts.
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "common/hex.h"

namespace space::tls {

// SHA-256 of the bytes, 32 raw bytes.
inline std::string sha256(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) != 1) std::abort();
  return std::string(reinterpret_cast<const char*>(md), len);
}
inline std::string sha256(std::string_view data) { return sha256(data.data(), data.size()); }

// SHA-256 in lowercase hex (64 characters).
inline std::string sha256_hex(const void* data, size_t n) { return to_hex(sha256(data, n)); }
inline std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

// HMAC-SHA256 of data under key, 32 raw bytes.
inline std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Never a null key pointer: HMAC() reads a null key as "no key given".
  const void* k = key.empty() ? "" : key.data();
  if (HMAC(EVP_sha256(), k, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len) == nullptr)
    std::abort();
  return std::string(reinterpret_cast<const char*>(md), len);
}

// HMAC-SHA256 in lowercase hex (64 characters).
inline std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  return to_hex(hmac_sha256(key, data));
}

// A running SHA-256 over a stream (exec output, a file read in pieces).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
  }
  void update(const void* data, size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), data, n) != 1) std::abort();
  }
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Finishes: the digest in lowercase hex. Call once.
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1) std::abort();
    return to_hex(md, len);
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

}  // namespace space::tls

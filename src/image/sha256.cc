// Streaming SHA-256 over OpenSSL's EVP interface (see sha256.h).
#include "image/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "common/hex.h"

namespace space::image {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Out of memory or a FIPS provider without SHA-256: nothing sensible is left to do.
  if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, size_t n) {
  if (n > 0 && EVP_DigestUpdate(ctx_, data, n) != 1) std::abort();
}

std::string Sha256::digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &len) != 1) std::abort();
  return "sha256:" + to_hex(md, len);
}

std::string sha256_digest(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.digest();
}

}  // namespace space::image

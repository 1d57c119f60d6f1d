// Streaming SHA-256 (OpenSSL EVP) for image blobs and layer streams: blobs are named by their
// digest, and every byte read from an upload is hashed as it passes, so a blob is read once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"

struct evp_md_ctx_st;

namespace space::image {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // "sha256:<64 lowercase hex>"; the object is spent afterwards.
  std::string digest();

 private:
  evp_md_ctx_st* ctx_;
};

// "sha256:<hex>" of a string.
std::string sha256_digest(std::string_view bytes);

}  // namespace space::image

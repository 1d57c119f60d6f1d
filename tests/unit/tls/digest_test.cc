// SHA-256 and HMAC-SHA256 (tls/digest.h) against published vectors: FIPS 180-2 ("abc", ""),
// RFC 4231 test cases 1 and 2.
#include "tls/digest.h"

#include <gtest/gtest.h>

namespace space::tls {
namespace {

TEST(Digest, Sha256) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex(abc.data(), abc.size()), sha256_hex(abc));
  EXPECT_EQ(to_hex(sha256(abc)), sha256_hex(abc));
  EXPECT_EQ(sha256(abc).size(), 32u);
}

TEST(Digest, StreamingSha256MatchesOneShot) {
  Sha256 s;
  s.update("a");
  s.update(std::string_view("bc"));
  EXPECT_EQ(s.hex(), sha256_hex("abc"));
  Sha256 empty;
  EXPECT_EQ(empty.hex(), sha256_hex(""));
}

TEST(Digest, HmacSha256) {
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            hmac_sha256_hex("Jefe", "what do ya want for nothing?"));
  // An empty key is a key (HMAC with a zero-length key), not "no key".
  EXPECT_EQ(hmac_sha256_hex("", ""),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

}  // namespace
}  // namespace space::tls

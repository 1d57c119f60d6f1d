// Masking: the forms an echoed secret takes are all found wherever they sit in a text, the
// matcher agrees with a naive search on random inputs, and nothing ordinary is masked.
#include "egress/mask.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>

namespace space::egress {
namespace {

const std::string kSecret = "ghp_S3cr3t/Value+with=\"odd\"&<chars>'~";

std::string b64(std::string_view s, bool url = false) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  if (url) {
    for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  }
  return out;
}

std::string masked(std::string_view value, std::string_view text) {
  return Redactor(std::make_shared<const MaskPatterns>(mask_forms(value))).mask(text);
}

bool leaks(const std::string& out) { return out.find("S3cr3t") != std::string::npos; }

TEST(MaskFormsTest, ValueFirstNoDuplicatesNoShortDerivedForms) {
  auto forms = mask_forms("abc");
  ASSERT_FALSE(forms.empty());
  EXPECT_EQ(forms[0], "abc");
  for (size_t i = 1; i < forms.size(); ++i) EXPECT_GE(forms[i].size(), 8u) << forms[i];
  auto more = mask_forms(kSecret);
  std::sort(more.begin(), more.end());
  EXPECT_EQ(std::unique(more.begin(), more.end()), more.end());
  EXPECT_TRUE(mask_forms("").empty());
}

// How services echo what they stored: each transformation of the secret, embedded in text.
TEST(MaskFormsTest, CommonEchoesAreMasked) {
  std::vector<std::string> echoes = {
      "{\"token\":\"ghp_S3cr3t\\/Value+with=\\\"odd\\\"&<chars>'~\"}",  // JSON with \/
      "{\"token\":\"ghp_S3cr3t/Value+with=\\\"odd\\\"&<chars>'~\"}",    // JSON without
      "<td>ghp_S3cr3t/Value+with=&quot;odd&quot;&amp;&lt;chars&gt;&#39;~</td>",
      "<td>ghp_S3cr3t/Value+with=&quot;odd&quot;&amp;&lt;chars&gt;&#x27;~</td>",
      "next=ghp_S3cr3t%2FValue%2Bwith%3D%22odd%22%26%3Cchars%3E%27~",
      "next=ghp_S3cr3t%2fValue%2bwith%3d%22odd%22%26%3cchars%3e%27~",
      "/ghp_S3cr3t/Value+with=%22odd%22&%3Cchars%3E'~",  // a path, sub-delimiters kept
  };
  for (const auto& e : echoes) {
    std::string out = masked(kSecret, e);
    EXPECT_FALSE(leaks(out)) << e << " -> " << out;
    EXPECT_EQ(out.size(), e.size());
  }
}

// Base64 of any text holding the secret, at every offset, standard and URL-safe, hex too: the
// encoded secret is masked; what remains readable is at most the 2 bytes at each edge.
TEST(MaskFormsTest, EncodedAtEveryAlignment) {
  for (size_t pad = 0; pad < 6; ++pad) {
    std::string text = std::string(pad, 'x') + "secret:" + kSecret + ";end";
    for (bool url : {false, true}) {
      std::string enc = b64(text, url);
      std::string out = masked(kSecret, enc);
      EXPECT_NE(out, enc) << pad;
      // Decoding what is left shows no 6 consecutive bytes of the secret.
      std::string dec(out.size(), '\0');
      std::string clean = out;
      for (char& c : clean) {
        if (c == '*') c = 'A';
        if (url) c = c == '-' ? '+' : c == '_' ? '/' : c;
      }
      int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(dec.data()),
                              reinterpret_cast<const unsigned char*>(clean.data()),
                              static_cast<int>(clean.size()));
      ASSERT_GT(n, 0);
      dec.resize(static_cast<size_t>(n));
      for (size_t i = 0; i + 6 <= kSecret.size(); ++i) {
        EXPECT_EQ(dec.find(kSecret.substr(i, 6)), std::string::npos) << pad << " " << url;
      }
    }
  }
  for (const char* digits : {"0123456789abcdef", "0123456789ABCDEF"}) {
    std::string hex = "sha=";
    for (unsigned char c : kSecret) hex += std::string{digits[c >> 4], digits[c & 15]};
    std::string out = masked(kSecret, hex);
    EXPECT_EQ(out, "sha=" + std::string(2 * kSecret.size(), '*'));
  }
}

TEST(MaskFormsTest, OrdinaryTextIsLeftAlone) {
  std::string text = "{\"login\":\"octocat\",\"id\":1,\"url\":\"https://api.example/users/1\"}";
  EXPECT_EQ(masked(kSecret, text), text);
  EXPECT_EQ(masked("short", "a short text"), "a ***** text");  // the value itself, any length
}

// The matcher against the naive definition: random patterns over a small alphabet (so they
// overlap, nest and recur), random texts; the match count and the masked output agree.
TEST(MaskPatternsTest, AgreesWithNaiveSearch) {
  std::mt19937 rng(7);
  auto rand_string = [&](size_t n, std::string_view alphabet) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> pats;
    for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) {
      pats.push_back(rand_string(1 + rng() % 9, "abc"));
    }
    std::string in = rand_string(rng() % 120, "abcd");
    std::vector<std::string> uniq = pats;
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    std::string want = in;
    size_t count = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      for (const auto& p : uniq) {
        if (in.compare(i, p.size(), p) == 0) {
          ++count;
          for (size_t k = 0; k < p.size(); ++k) want[i + k] = '*';
        }
      }
    }
    Redactor r(pats);
    std::string got;
    size_t prev = 0;
    for (int cuts = static_cast<int>(rng() % 5); cuts >= 0; --cuts) {
      size_t c = prev + (in.size() > prev ? rng() % (in.size() - prev + 1) : 0);
      got += r.feed(std::string_view(in).substr(prev, c - prev));
      prev = c;
    }
    got += r.feed(std::string_view(in).substr(prev));
    got += r.finish();
    ASSERT_EQ(got, want) << "in=" << in << " iter=" << iter;
    ASSERT_EQ(r.redactions(), count) << "in=" << in;
  }
}

TEST(MaskPatternsTest, ManyPatternsOnePass) {
  std::vector<std::string> pats;
  for (int i = 0; i < 200; ++i) pats.push_back("tok-" + std::to_string(i * 7919) + "-x");
  auto m = std::make_shared<const MaskPatterns>(pats);
  EXPECT_EQ(m->patterns(), 200u);
  std::string text(1 << 20, '.');
  text.replace(12345, pats[199].size(), pats[199]);
  Redactor r(m);
  std::string out = r.feed(text) + r.finish();
  EXPECT_EQ(r.redactions(), 1u);
  EXPECT_EQ(out.find("tok-"), std::string::npos);
}

}  // namespace
}  // namespace space::egress

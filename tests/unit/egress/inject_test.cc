// Credential injection (src/egress/inject.cc): a Basic credential is decoded, the placeholder
// replaced inside user:password (as password, as user, both) and encoded again; anything that is
// not strict base64 passes untouched; the placeholder elsewhere, in another header, or in a
// secret with a configured header (one-way) is never replaced; query parameters as before.
#include "egress/inject.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace space::egress {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

const std::string kPh = "space_ph_GIT_TOKEN_0123456789abcdef0123456789abcdef";
const std::string kValue = "ghp_R3alT0ken:with/+chars";

SecretDef def(json extra = json::object()) {
  json j = {{"value", kValue}, {"hosts", {"git.example"}}, {"profiles", {"live"}}};
  j.update(extra);
  auto d = SecretDef::from_json("GIT_TOKEN", j);
  EXPECT_TRUE(d) << d.error().message();
  return d ? *d : SecretDef{};
}

http::request_header<> request(std::vector<std::pair<std::string, std::string>> fields,
                               std::string target = "/repo.git/info/refs") {
  http::request_header<> req;
  req.method(http::verb::get);
  req.target(target);
  req.version(11);
  for (auto& [n, v] : fields) req.insert(n, v);
  return req;
}

std::string basic(std::string_view user_pass) { return "Basic " + base64_encode(user_pass); }

TEST(Base64, RoundTripsAndIsStrict) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("\xff\xfe"), "//4=");
  for (const std::string& s : std::vector<std::string>{
           "", "a", "ab", "abc", "abcd", "x-access-token:secret", std::string("\0\1\2\xff", 4)})
    EXPECT_EQ(base64_decode(base64_encode(s)), s);
  EXPECT_EQ(base64_decode("Zm9v"), "foo");
  EXPECT_EQ(base64_decode("Zg=="), "f");
  EXPECT_FALSE(base64_decode("Zg="));       // unpadded
  EXPECT_FALSE(base64_decode("Zg"));        // unpadded
  EXPECT_FALSE(base64_decode("Zh=="));      // non-zero bits after the last byte
  EXPECT_FALSE(base64_decode("Zm9v-_=="));  // URL-safe alphabet
  EXPECT_FALSE(base64_decode("Zm 9v"));
  EXPECT_FALSE(base64_decode("Z==="));
  EXPECT_FALSE(base64_decode("=Zm9"));
  EXPECT_FALSE(base64_decode("Zm=v"));
}

TEST(BasicAuth, PlaceholderAsPassword) {
  auto req = request({{"Authorization", basic("x-access-token:" + kPh)}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], basic("x-access-token:" + kValue));
}

TEST(BasicAuth, PlaceholderAsUser) {
  auto req = request({{"Authorization", basic(kPh + ":x-oauth-basic")}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], basic(kValue + ":x-oauth-basic"));
  // git's form for a token with no password: "TOKEN:" (empty password).
  req = request({{"Authorization", basic(kPh + ":")}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], basic(kValue + ":"));
}

TEST(BasicAuth, EveryOccurrenceAndAnyAlignment) {
  // The placeholder at every offset (so at every base64 alignment) and twice.
  for (std::string prefix : std::vector<std::string>{"", "a", "ab", "abc"}) {
    auto req = request({{"Authorization", basic(prefix + kPh + ":" + kPh)}});
    inject(req, def(), kPh, kValue);
    EXPECT_EQ(req[http::field::authorization], basic(prefix + kValue + ":" + kValue)) << prefix;
  }
}

TEST(BasicAuth, SchemeIsCaseInsensitiveSpacingKept) {
  auto req = request({{"Authorization", "bAsIc  " + base64_encode("u:" + kPh)}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], "bAsIc  " + base64_encode("u:" + kValue));
}

TEST(BasicAuth, NoPlaceholderLeavesTheFieldAsSent) {
  std::string sent = basic("alice:hunter2");
  auto req = request({{"Authorization", sent}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], sent);
  // Another secret's placeholder is not this one's.
  sent = basic("x:space_ph_OTHER_0123456789abcdef0123456789abcdef");
  req = request({{"Authorization", sent}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], sent);
}

TEST(BasicAuth, MalformedBase64PassesUntouched) {
  std::string good = base64_encode("x-access-token:" + kPh);
  for (const std::string& bad : std::vector<std::string>{
           "Basic " + good.substr(0, good.size() - 1),           // truncated
           "Basic " + good + "=",                                // extra padding
           "Basic " + good.substr(0, 8) + "*" + good.substr(9),  // not in the alphabet
           "Basic " + good.substr(0, 8) + " " + good.substr(8),  // space inside
           "Basic x-access-token:" + kPh,                        // not encoded at all
           "Basic",                                              // no credential
       }) {
    auto req = request({{"Authorization", bad}});
    inject(req, def(), kPh, kValue);
    EXPECT_EQ(req[http::field::authorization], bad);
  }
}

TEST(BasicAuth, OtherSchemesReplacedAsText) {
  auto req = request({{"Authorization", "Bearer " + kPh}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], "Bearer " + kValue);
  // "Basicx" is not the Basic scheme: replaced as text.
  req = request({{"Authorization", "Basicx " + kPh}});
  inject(req, def(), kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], "Basicx " + kValue);
}

TEST(BasicAuth, OnlyInAuthorization) {
  // A Basic credential in a header listed by placeholder_in other than Authorization is text:
  // its base64 is not opened (the rule is for Authorization only).
  SecretDef d = def({{"placeholder_in", {"Authorization", "X-Api-Key"}}});
  std::string b64 = basic("u:" + kPh);
  auto req = request({{"X-Api-Key", b64}, {"Cookie", b64}, {"X-Other", kPh}});
  inject(req, d, kPh, kValue);
  EXPECT_EQ(req["X-Api-Key"], b64);
  EXPECT_EQ(req[http::field::cookie], b64);
  EXPECT_EQ(req["X-Other"], kPh);
  // Not listed: Authorization is not touched at all.
  SecretDef q = def({{"placeholder_in", {"X-Api-Key"}}});
  req = request({{"Authorization", b64}, {"X-Api-Key", kPh}});
  inject(req, q, kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], b64);
  EXPECT_EQ(req["X-Api-Key"], kValue);
}

TEST(BasicAuth, HeaderFormIsUnchanged) {
  // A secret with "header" sets that header from format and replaces the placeholder nowhere,
  // not even inside a Basic credential in another field.
  SecretDef d = def({{"header", "Authorization"}, {"format", "Bearer {}"}});
  auto req = request({{"Authorization", basic("x-access-token:" + kPh)}});
  inject(req, d, kPh, kValue);
  EXPECT_EQ(req[http::field::authorization], "Bearer " + kValue);
  SecretDef h = def({{"header", "X-Token"}, {"format", "{}"}});
  std::string b64 = basic("x-access-token:" + kPh);
  req = request({{"Authorization", b64}});
  inject(req, h, kPh, kValue);
  EXPECT_EQ(req["X-Token"], kValue);
  EXPECT_EQ(req[http::field::authorization], b64);
}

TEST(BasicAuth, SeveralAuthorizationFieldsKeepTheirOrder) {
  auto req = request({{"Authorization", "Bearer other"}, {"Authorization", basic("u:" + kPh)}});
  inject(req, def(), kPh, kValue);
  auto [from, to] = req.equal_range(http::field::authorization);
  std::vector<std::string> got;
  for (auto it = from; it != to; ++it) got.emplace_back(it->value());
  EXPECT_EQ(got, (std::vector<std::string>{"Bearer other", basic("u:" + kValue)}));
}

TEST(InjectQuery, WholeValueOfAListedParameterOnly) {
  SecretDef d = def({{"placeholder_in", {"query:key"}}});
  auto req = request({}, "/x?key=" + kPh + "&other=" + kPh + "&key=pre" + kPh);
  inject(req, d, kPh, "a b");
  EXPECT_EQ(req.target(), "/x?key=a%20b&other=" + kPh + "&key=pre" + kPh);
}

}  // namespace
}  // namespace space::egress

// AWS Signature Version 4 (sigv4.h), from the specification: "Create a canonical request",
// "Create a string to sign", "Calculate the signature" (the derived signing key).
#include "cluster/sigv4.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

namespace space::cluster::sigv4 {
namespace {

std::string sigv4_trim(std::string_view v) {
  // Leading and trailing spaces dropped, runs of spaces inside made one.
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string sigv4_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string uri_encode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(uri_encode(k, false), uri_encode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

std::string amz_date(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  ::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Signature sign(const Request& request, const Credentials& credentials, std::string_view amz_date,
               std::string_view region, std::string_view service) {
  // Headers: lowercase names, sorted; values trimmed; repeated names joined with ','.
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [k, v] : request.headers) headers.emplace_back(sigv4_lower(k), sigv4_trim(v));
  std::stable_sort(headers.begin(), headers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers, signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();  // the '\n'
      canonical_headers += "," + headers[i].second + "\n";
      continue;
    }
    canonical_headers += headers[i].first + ":" + headers[i].second + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += headers[i].first;
  }

  Signature out;
  out.canonical_request = request.method + "\n" +
                          (request.path.empty() ? std::string("/") : request.path) + "\n" +
                          canonical_query(request.query) + "\n" + canonical_headers + "\n" +
                          signed_headers + "\n" + request.payload_sha256;
  const std::string date(amz_date.substr(0, 8));
  const std::string scope =
      date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" +
                       sha256_hex(out.canonical_request);
  std::string key = tls::hmac_sha256("AWS4" + credentials.secret_access_key, date);
  key = tls::hmac_sha256(key, region);
  key = tls::hmac_sha256(key, service);
  key = tls::hmac_sha256(key, "aws4_request");
  const std::string mac = tls::hmac_sha256(key, out.string_to_sign);
  out.signature = to_hex(mac);
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                      ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace space::cluster::sigv4

// AWS Signature Version 4 (the "Authorization: AWS4-HMAC-SHA256 ..." header that S3 and
// S3-compatible services require), written from AWS's specification: a canonical request
// (method, URI-encoded path, sorted query, sorted lowercase headers, the payload's SHA-256),
// its SHA-256 in a string to sign with the date and scope, and an HMAC-SHA256 chain
// (secret -> date -> region -> service -> "aws4_request") that signs it. OpenSSL does the
// hashing. Kept apart from the S3 store so that tests check it against AWS's published
// examples.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tls/digest.h"

namespace space::cluster::sigv4 {

struct Credentials {
  std::string access_key_id, secret_access_key;
  std::string session_token;  // temporary credentials: sent as x-amz-security-token
};

struct Request {
  std::string method;  // "GET"
  std::string path;    // as sent, already URI-encoded ("/bucket/a%20b"); "" means "/"
  std::vector<std::pair<std::string, std::string>> query;    // raw names and values
  std::vector<std::pair<std::string, std::string>> headers;  // every header to sign (Host too)
  std::string payload_sha256;                                // lowercase hex SHA-256 of the body
};

struct Signature {
  std::string canonical_request, string_to_sign, signature;
  std::string authorization;  // the Authorization header's value
};

// `amz_date`: the request's X-Amz-Date ("20150830T123600Z"), which must also be among the
// headers; `region` "us-east-1"; `service` "s3".
Signature sign(const Request& request, const Credentials& credentials, std::string_view amz_date,
               std::string_view region, std::string_view service);

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters (A-Z a-z 0-9 - _ . ~)
// as they are, every other byte as %XY (uppercase); '/' kept when `keep_slash`.
std::string uri_encode(std::string_view s, bool keep_slash);
// The canonical query string of `query`: each name and value encoded, sorted, '&'-joined.
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);
using tls::sha256_hex;  // lowercase hex (tls/digest.h)
// "20150830T123600Z" for a time in seconds since the epoch (UTC).
std::string amz_date(int64_t unix_seconds);

}  // namespace space::cluster::sigv4

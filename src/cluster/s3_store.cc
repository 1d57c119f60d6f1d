// The S3 object store (s3_store.h): each operation one signed HTTP request; S3's XML answers
// (ListObjectsV2 results, errors) read with a small tag scanner, since only a few leaf elements
// matter and their text is all that is used.
#include "cluster/s3_store.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cluster/http_client.h"
#include "cluster/sigv4.h"
#include "common/hex.h"
#include "common/utf8.h"

namespace space::cluster {
namespace {

constexpr size_t kS3MaxListBody = 16 << 20;
constexpr size_t kS3ClientBodyLimit = 64 << 20;
constexpr int kS3MaxListPages = 100'000;

bool s3_bucket_ok(const std::string& b) {
  // S3's rules: 3-63 characters of [a-z0-9.-], starting and ending with a letter or digit.
  if (b.size() < 3 || b.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return false;
  return std::all_of(b.begin(), b.end(), [&](char c) { return alnum(c) || c == '.' || c == '-'; });
}

bool s3_percent_decode(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      *out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (in[i] == '+') {
      *out += ' ';
    } else {
      *out += in[i];
    }
  }
  return true;
}

// XML text with its five entities and numeric character references decoded.
std::string s3_xml_text(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      unsigned long cp = 0;
      try {
        cp = ent[1] == 'x' ? std::stoul(std::string(ent.substr(2)), nullptr, 16)
                           : std::stoul(std::string(ent.substr(1)), nullptr, 10);
      } catch (...) {
        cp = 0xFFFD;
      }
      out += encode_utf8(static_cast<char32_t>(cp));
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The text of every <tag>...</tag> leaf element in `xml`, in order.
std::vector<std::string> s3_xml_all(std::string_view xml, std::string_view tag) {
  std::vector<std::string> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string_view::npos) {
    size_t start = at + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(s3_xml_text(xml.substr(start, end - start)));
    at = end + close.size();
  }
  return out;
}

std::string s3_xml_first(std::string_view xml, std::string_view tag) {
  auto all = s3_xml_all(xml, tag);
  return all.empty() ? "" : all.front();
}

Result<sigv4::Credentials> s3_credentials(const std::string& url,
                                          const ObjectStoreOptions& options) {
  sigv4::Credentials c;
  if (!options.credentials_file.empty()) {
    std::ifstream in(options.credentials_file);
    if (!in)
      return fail(Code::kInvalidArgument, "store " + url + ": cannot read the credentials file " +
                                              options.credentials_file +
                                              " (check that it exists and is readable)");
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    auto str = [&](const char* k) {
      return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
    };
    c.access_key_id = str("access_key_id");
    c.secret_access_key = str("secret_access_key");
    c.session_token = str("session_token");
    if (c.access_key_id.empty() || c.secret_access_key.empty())
      return fail(Code::kInvalidArgument,
                  "store " + url + ": the credentials file " + options.credentials_file +
                      " must be a JSON object with \"access_key_id\" and \"secret_access_key\"");
    return c;
  }
  const char* id = ::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = ::getenv("AWS_SECRET_ACCESS_KEY");
  const char* token = ::getenv("AWS_SESSION_TOKEN");
  if (!id || !*id || !secret || !*secret)
    return fail(Code::kInvalidArgument,
                "store " + url +
                    ": no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                    "give a credentials file ({\"access_key_id\", \"secret_access_key\"})");
  c.access_key_id = id;
  c.secret_access_key = secret;
  if (token) c.session_token = token;
  return c;
}

class S3Store final : public ObjectStore {
 public:
  S3Store(S3Location loc, sigv4::Credentials creds, std::unique_ptr<HttpClient> http,
          std::string url, int page_keys)
      : page_keys_(std::clamp(page_keys, 1, 1000)),
        loc_(std::move(loc)),
        creds_(std::move(creds)),
        http_(std::move(http)),
        url_(std::move(url)) {}

  const std::string& url() const override { return url_; }

  Result<void> put(const std::string& key, std::string_view data) override {
    TRY_VOID(check_key(key));
    const std::string ctx = "writing " + key + " in " + url_;
    HttpResponse r = TRY_CTX(send("PUT", object_path(key), {}, std::string(data)), ctx);
    if (r.status != 200) return fail(status_error(r, ctx));
    return {};
  }

  Result<bool> exists(const std::string& key) override {
    TRY_VOID(check_key(key));
    const std::string ctx = "looking up " + key + " in " + url_;
    HttpResponse r = TRY_CTX(send("HEAD", object_path(key), {}, ""), ctx);
    if (r.status == 200) return true;
    if (r.status == 404) return false;
    return fail(status_error(r, ctx));
  }

  Result<std::string> get(const std::string& key, size_t max_bytes) override {
    TRY_VOID(check_key(key));
    const std::string ctx = "reading " + key + " in " + url_;
    if (max_bytes > kS3ClientBodyLimit) {
      // Beyond what a whole response may hold: the body read from a stream, up to the limit.
      auto stream = TRY_CTX(open_stream("GET", object_path(key)), ctx);
      if (stream->status() == 200) {
        auto body = stream->read_all(max_bytes);
        if (!body) return fail(std::move(body.error()).wrap(ctx));
        return body;
      }
      HttpResponse r;
      r.status = stream->status();
      r.headers = stream->headers();
      if (auto body = stream->read_all(64 << 10)) r.body = std::move(*body);
      if (r.status == 404) return fail(Code::kNotFound, ctx + ": no such object");
      return fail(status_error(r, ctx));
    }
    auto r = send("GET", object_path(key), {}, "");
    if (!r) return fail(std::move(r.error()).wrap(ctx));
    if (r->status == 404) return fail(Code::kNotFound, ctx + ": no such object");
    if (r->status != 200) return fail(status_error(*r, ctx));
    if (r->body.size() > max_bytes)
      return fail(Code::kPayloadTooLarge, ctx + ": it has " + std::to_string(r->body.size()) +
                                              " bytes, more than the " + std::to_string(max_bytes) +
                                              " allowed");
    return std::move(r->body);
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    TRY_VOID(check_prefix(prefix));
    const std::string ctx = "listing " + (prefix.empty() ? "everything" : prefix) + " in " + url_;
    const std::string full = loc_.prefix.empty() ? prefix : loc_.prefix + "/" + prefix;
    const std::string strip = loc_.prefix.empty() ? "" : loc_.prefix + "/";
    std::vector<std::string> out;
    std::string token;
    for (int page = 0; page < kS3MaxListPages; ++page) {
      std::vector<std::pair<std::string, std::string>> query{
          {"list-type", "2"}, {"prefix", full}, {"max-keys", std::to_string(page_keys_)}};
      if (!token.empty()) query.emplace_back("continuation-token", token);
      HttpResponse r = TRY_CTX(send("GET", "/" + loc_.bucket, query, ""), ctx);
      if (r.status != 200) return fail(status_error(r, ctx));
      if (r.body.size() > kS3MaxListBody)
        return fail(Code::kProtocol, ctx + ": a listing page is larger than 16 MiB");
      for (std::string& key : s3_xml_all(r.body, "Key")) {
        if (!key.starts_with(strip)) continue;
        key.erase(0, strip.size());
        if (key.starts_with(prefix) && check_key(key)) out.push_back(std::move(key));
      }
      if (s3_xml_first(r.body, "IsTruncated") != "true") {
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        return out;
      }
      token = s3_xml_first(r.body, "NextContinuationToken");
      if (token.empty())
        return fail(Code::kProtocol,
                    ctx + ": a truncated listing came without a NextContinuationToken");
    }
    return fail(Code::kProtocol, ctx + ": more than 100000 listing pages");
  }

  Result<void> remove(const std::string& key) override {
    TRY_VOID(check_key(key));
    const std::string ctx = "removing " + key + " in " + url_;
    HttpResponse r = TRY_CTX(send("DELETE", object_path(key), {}, ""), ctx);
    if (r.status == 200 || r.status == 204 || r.status == 404) return {};
    return fail(status_error(r, ctx));
  }

 private:
  // "/bucket/prefix/key", each component URI-encoded (keys need none: check_key's alphabet).
  std::string object_path(const std::string& key) const {
    std::string k = loc_.prefix.empty() ? key : loc_.prefix + "/" + key;
    return "/" + loc_.bucket + "/" + sigv4::uri_encode(k, /*keep_slash=*/true);
  }

  // The request for `method path?query` with its SigV4 headers.
  HttpRequest signed_request(const std::string& method, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& query,
                             std::string body) const {
    HttpRequest req;
    req.method = method;
    std::string q = sigv4::canonical_query(query);
    req.target = path + (q.empty() ? "" : "?" + q);
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const std::string date = sigv4::amz_date(now);
    const std::string payload = sigv4::sha256_hex(body);
    sigv4::Request sr;
    sr.method = method;
    sr.path = http_->url().path + path;  // the endpoint's own path, if any, comes first
    sr.query = query;
    sr.headers = {{"Host", http_->url().authority()},
                  {"x-amz-content-sha256", payload},
                  {"x-amz-date", date}};
    if (!creds_.session_token.empty())
      sr.headers.emplace_back("x-amz-security-token", creds_.session_token);
    sr.payload_sha256 = payload;
    sigv4::Signature sig = sigv4::sign(sr, creds_, date, loc_.region, "s3");
    req.headers = sr.headers;
    req.headers.emplace_back("Authorization", sig.authorization);
    req.body = std::move(body);
    return req;
  }

  Result<HttpResponse> send(const std::string& method, const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& query,
                            std::string body) {
    return http_->request(signed_request(method, path, query, std::move(body)));
  }

  Result<std::unique_ptr<HttpStream>> open_stream(const std::string& method,
                                                  const std::string& path) {
    return http_->stream(signed_request(method, path, {}, ""));
  }

  // An S3 error answer as an Error: its code and message, and what to check.
  Error status_error(const HttpResponse& r, const std::string& ctx) const {
    std::string code = s3_xml_first(r.body, "Code"), message = s3_xml_first(r.body, "Message");
    std::string what = "HTTP " + std::to_string(r.status);
    if (!code.empty()) what += " " + code;
    if (!message.empty()) what += ": " + message.substr(0, 300);
    if (r.status == 403 || r.status == 401 || code == "SignatureDoesNotMatch" ||
        code == "InvalidAccessKeyId")
      return Error(Code::kPermissionDenied,
                   ctx + ": " + what + " (check the access key, the secret key, the region \"" +
                       loc_.region + "\" and the clock)");
    if (code == "NoSuchBucket")
      return Error(Code::kNotFound,
                   ctx + ": " + what + " (check that bucket \"" + loc_.bucket + "\" exists)");
    if (r.status >= 500) return Error(Code::kUnavailable, ctx + ": " + what);
    return Error(Code::kProtocol, ctx + ": unexpected answer " + what);
  }

  int page_keys_;
  S3Location loc_;
  sigv4::Credentials creds_;
  std::unique_ptr<HttpClient> http_;
  std::string url_;
};

}  // namespace

Result<S3Location> parse_s3_url(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return fail(Code::kInvalidArgument,
                "store URL \"" + url.substr(0, 300) + "\": " + why +
                    " (s3://bucket/prefix?endpoint=http://host:port&region=us-east-1)");
  };
  if (!url.starts_with("s3://")) return bad("not an s3:// URL");
  std::string rest = url.substr(5), query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest.resize(q);
  }
  if (rest.find('#') != std::string::npos) return bad("a fragment is not allowed");
  S3Location loc;
  size_t slash = rest.find('/');
  loc.bucket = rest.substr(0, slash);
  if (!s3_bucket_ok(loc.bucket))
    return bad("the bucket name must be 3-63 characters of [a-z0-9.-]");
  if (slash != std::string::npos) {
    loc.prefix = rest.substr(slash + 1);
    while (loc.prefix.ends_with("/")) loc.prefix.pop_back();
    if (!loc.prefix.empty() && !check_key(loc.prefix))
      return bad("the prefix must be '/'-separated components of [A-Za-z0-9._-]");
  }
  size_t start = 0;
  while (start < query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string::npos) amp = query.size();
    std::string item = query.substr(start, amp - start);
    start = amp + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string name = item.substr(0, eq), value;
    if (eq == std::string::npos || !s3_percent_decode(item.substr(eq + 1), &value))
      return bad("malformed query parameter \"" + item.substr(0, 100) + "\"");
    if (name == "endpoint")
      loc.endpoint = value;
    else if (name == "region")
      loc.region = value;
    else
      return bad("unknown parameter \"" + name.substr(0, 100) + "\"");
  }
  if (loc.region.empty()) loc.region = "us-east-1";
  if (!std::all_of(loc.region.begin(), loc.region.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
      }))
    return bad("the region must be [a-z0-9-]");
  if (loc.endpoint.empty()) loc.endpoint = "https://s3." + loc.region + ".amazonaws.com";
  while (loc.endpoint.ends_with("/")) loc.endpoint.pop_back();
  return loc;
}

Result<std::unique_ptr<ObjectStore>> open_s3_store(const std::string& url,
                                                   const ObjectStoreOptions& options) {
  S3Location loc = TRY(parse_s3_url(url));
  sigv4::Credentials creds = TRY(s3_credentials(url, options));
  HttpOptions http;
  http.service = "S3";
  http.io_timeout = std::chrono::milliseconds(options.timeout_ms);
  http.body_limit = kS3ClientBodyLimit;
  http.tls.ca_file = options.ca_file;
  auto client = HttpClient::create(loc.endpoint, http);
  if (!client) return fail(std::move(client.error()).wrap("store " + url + ": the endpoint"));
  return std::unique_ptr<ObjectStore>(new S3Store(std::move(loc), std::move(creds),
                                                  std::move(*client), url, options.list_page_keys));
}

}  // namespace space::cluster

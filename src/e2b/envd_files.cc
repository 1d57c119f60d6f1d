// envd's REST /files over SandboxService::read_file and write_file.
//
//   GET /files?path=P[&username=U]: the file's bytes (application/octet-stream), gzip-encoded
//     when Accept-Encoding names gzip;
//   POST /files?path=P[&username=U]: application/octet-stream (the body is the file, written
//     to P; Content-Encoding gzip is inflated) or multipart/form-data with one or more parts
//     (each written to P when P is given and there is one part, else to the part's filename);
//     answers [{"name", "type": "file", "path"}] of what was written.
// Relative paths resolve against the user's home (envd.cc). Parent directories are made.
// Multipart bodies are read whole (at most kMaxMultipart); octet-stream bodies are streamed.
// Errors are E2B's {"code", "message"} (door.cc renders them).
#include <zlib.h>

#include <cstring>

#include "e2b/handlers.h"
#include "e2b/wire.h"

namespace space::e2b {

namespace {

using nlohmann::json;

constexpr size_t kMaxMultipart = 256u << 20;
constexpr size_t kChunk = 64 << 10;

bool has_token(std::string_view header, std::string_view token) {
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t comma = header.find(',', pos);
    if (comma == std::string_view::npos) comma = header.size();
    std::string_view t = header.substr(pos, comma - pos);
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    t = t.substr(0, t.find(';'));
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    if (t.size() == token.size() && strncasecmp(t.data(), token.data(), t.size()) == 0) return true;
    pos = comma + 1;
  }
  return false;
}

// The media type, lower case: /files compares it case-insensitively.
std::string lower_media_type(std::string_view ct) {
  std::string t(media_type(ct));
  for (auto& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

Result<std::string> gunzip(std::string_view in, size_t limit) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return fail(Code::kInternal, "inflateInit2 failed");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  int rc = Z_OK;
  char buf[kChunk];
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      return fail(Code::kInvalidArgument, "the body is not valid gzip (Content-Encoding gzip)");
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > limit) {
      inflateEnd(&z);
      return fail(Code::kPayloadTooLarge,
                  "the inflated body is larger than " + std::to_string(limit >> 20) + " MiB");
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) break;  // truncated
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END)
    return fail(Code::kInvalidArgument, "the gzip body (Content-Encoding gzip) is truncated");
  return out;
}

// A ChunkSource inflating a gzip ChunkSource.
struct Inflater {
  daemon::ChunkSource in;
  z_stream z{};
  bool ok = false, done = false;
  std::string pending;
  explicit Inflater(daemon::ChunkSource src) : in(std::move(src)) {
    ok = inflateInit2(&z, 15 + 32) == Z_OK;
  }
  ~Inflater() {
    if (ok) inflateEnd(&z);
  }
  Result<void> next(std::string& out) {
    out.clear();
    if (!ok) return fail(Code::kInternal, "inflateInit2 failed");
    char buf[kChunk];
    while (out.empty() && !done) {
      if (z.avail_in == 0) {
        TRY_VOID(in(pending));
        if (pending.empty())
          return fail(Code::kInvalidArgument, "the gzip body (Content-Encoding gzip) is truncated");
        z.next_in = reinterpret_cast<Bytef*>(pending.data());
        z.avail_in = uInt(pending.size());
      }
      while (z.avail_in > 0 && !done) {
        z.next_out = reinterpret_cast<Bytef*>(buf);
        z.avail_out = sizeof buf;
        int rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
          return fail(Code::kInvalidArgument, "the body is not valid gzip (Content-Encoding gzip)");
        out.append(buf, sizeof buf - z.avail_out);
        if (rc == Z_STREAM_END) done = true;
        if (out.size() >= kChunk) return {};
      }
    }
    return {};
  }
};

json written(const std::string& path) {
  return {{"name", path.substr(path.rfind('/') + 1)}, {"type", "file"}, {"path", path}};
}

std::string username(const Call& call) {
  auto it = call.ex.target().query.find("username");
  if (it != call.ex.target().query.end() && !it->second.empty()) return it->second;
  return envd_username(call.ex);
}

Result<void> get_file(Call& call, const EnvdUser& user) {
  auto q = call.ex.target().query.find("path");
  if (q == call.ex.target().query.end() || q->second.empty())
    return fail(Code::kInvalidArgument, "GET /files needs ?path=");
  std::string path = envd_path(user, q->second);
  auto st = TRY(call.service.stat(call.sandbox_id, path));
  if (st.type == "dir")
    return fail(Code::kInvalidArgument, "path " + path + " is a directory, not a file");
  const bool gz = has_token(call.ex.header(http::field::accept_encoding), "gzip");
  api::Headers headers = {
      {"Content-Disposition", "inline; filename=\"" + path.substr(path.rfind('/') + 1) + "\""},
      {"Cache-Control", "no-store"}};
  if (gz) headers.emplace_back("Content-Encoding", "gzip");
  z_stream z{};
  if (gz &&
      deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return fail(Code::kInternal, "deflateInit2 failed");
  struct End {
    z_stream* z;
    bool gz;
    ~End() {
      if (gz) deflateEnd(z);
    }
  } end{&z, gz};
  bool begun = false;
  Result<void> wr;
  auto deflate_out = [&](std::string_view in, int flush) -> bool {
    char buf[kChunk];
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(in.size());
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      size_t n = sizeof buf - z.avail_out;
      if (n && !(wr = call.ex.write_chunk(std::string_view(buf, n)))) return false;
    } while (z.avail_out == 0);
    return true;
  };
  auto r = call.service.read_file(call.sandbox_id, path, [&](std::string_view c) {
    if (!begun) {
      begun = true;
      if (!(wr = call.ex.begin_chunked(http::status::ok, "application/octet-stream", headers)))
        return false;
    }
    if (gz) return deflate_out(c, Z_NO_FLUSH);
    return bool(wr = call.ex.write_chunk(c));
  });
  if (!r) return r;
  if (!wr) return wr;
  if (!begun)
    TRY_VOID(call.ex.begin_chunked(http::status::ok, "application/octet-stream", headers));
  if (gz && !deflate_out({}, Z_FINISH)) return wr;
  return call.ex.end_chunked();
}

Result<void> write_one(Call& call, const EnvdUser& user, const std::string& path,
                       const daemon::ChunkSource& source) {
  if (auto st = call.service.stat(call.sandbox_id, path); st && st->type == "dir")
    return fail(Code::kInvalidArgument, "path " + path + " is a directory");
  return envd_write(call, user, path, source);
}

Result<void> post_file(Call& call, const EnvdUser& user) {
  auto q = call.ex.target().query.find("path");
  std::string path_param = q == call.ex.target().query.end() ? "" : q->second;
  std::string type = lower_media_type(call.ex.header(http::field::content_type));
  std::string_view encoding = call.ex.header(http::field::content_encoding);
  const bool gz = has_token(encoding, "gzip");
  if (!encoding.empty() && !gz && !has_token(encoding, "identity"))
    return fail(Code::kInvalidArgument,
                "Content-Encoding " + std::string(encoding) + ": only gzip is accepted");
  json out = json::array();
  if (type == "application/octet-stream") {
    if (path_param.empty())
      return fail(Code::kInvalidArgument, "POST /files with application/octet-stream needs ?path=");
    std::string path = envd_path(user, path_param);
    daemon::ChunkSource source = call.ex.body_source();
    std::shared_ptr<Inflater> inflater;
    if (gz) {
      inflater = std::make_shared<Inflater>(std::move(source));
      source = [inflater](std::string& o) { return inflater->next(o); };
    }
    TRY_VOID(write_one(call, user, path, source));
    out.push_back(written(path));
    return call.ex.respond_json(http::status::ok, out);
  }
  if (type != "multipart/form-data")
    return fail(
        Code::kInvalidArgument,
        "POST /files takes multipart/form-data or application/octet-stream, not \"" + type + "\"");
  auto boundary = header_param(call.ex.header(http::field::content_type), "boundary");
  if (!boundary || boundary->empty())
    return fail(Code::kInvalidArgument, "multipart/form-data without a boundary");
  std::string body = TRY(call.ex.read_body(kMaxMultipart));
  if (gz) body = TRY(gunzip(body, kMaxMultipart));
  auto parts = TRY(parse_multipart(body, *boundary));
  for (auto& part : parts) {
    std::string target = !path_param.empty() && parts.size() == 1 ? path_param : part.filename;
    if (target.empty())
      return fail(Code::kInvalidArgument, "a multipart part has no filename and ?path= names none");
    std::string path = envd_path(user, target);
    bool given = false;
    std::string_view data = part.data;
    TRY_VOID_CTX(write_one(call, user, path,
                           [&](std::string& o) -> Result<void> {
                             o.clear();
                             if (given || data.empty()) return {};
                             size_t n = std::min(data.size(), size_t(1) << 20);
                             o.assign(data.substr(0, n));
                             data.remove_prefix(n);
                             if (data.empty()) given = true;
                             return {};
                           }),
                 "writing " + path);
    out.push_back(written(path));
  }
  return call.ex.respond_json(http::status::ok, out);
}

}  // namespace

Result<void> envd_files(Call& call) {
  EnvdUser user = TRY(envd_user(call, username(call)));
  if (call.ex.method() == http::verb::get) return get_file(call, user);
  if (call.ex.method() == http::verb::post) return post_file(call, user);
  return fail(Code::kInvalidArgument, "/files takes GET (read) and POST (write)");
}

}  // namespace space::e2b

#include "e2b/wire.h"

#include <strings.h>

#include "common/hex.h"

namespace space::e2b {

Result<std::optional<std::string>> parse_envelope(std::string_view data, size_t* used,
                                                  uint8_t* flags) {
  if (data.size() < 5) return std::optional<std::string>();
  const auto* b = reinterpret_cast<const unsigned char*>(data.data());
  uint32_t len = (uint32_t(b[1]) << 24) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 8) | b[4];
  if (b[0] & 0x01)
    return fail(Code::kUnimplemented,
                "compressed Connect envelopes are not accepted: send them uncompressed");
  if (len > kMaxConnectMessage)
    return fail(Code::kPayloadTooLarge, "a Connect message of " + std::to_string(len) +
                                            " bytes; at most " +
                                            std::to_string(kMaxConnectMessage >> 20) + " MiB");
  if (data.size() < 5 + size_t(len)) return std::optional<std::string>();
  if (flags) *flags = b[0];
  *used = 5 + size_t(len);
  return std::optional<std::string>(std::string(data.substr(5, len)));
}

std::string envelope(uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  uint32_t n = uint32_t(payload.size());
  out.push_back(char(flags));
  out.push_back(char(n >> 24));
  out.push_back(char((n >> 16) & 0xff));
  out.push_back(char((n >> 8) & 0xff));
  out.push_back(char(n & 0xff));
  out.append(payload);
  return out;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned port = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    port = port * 10 + unsigned(c - '0');
  }
  if (port == 0 || port > 65535) return std::nullopt;
  return uint16_t(port);
}

std::optional<std::pair<uint16_t, std::string>> route_host(std::string_view host,
                                                           std::string_view domain) {
  if (domain.empty()) return std::nullopt;
  if (auto colon = host.rfind(':');
      colon != std::string_view::npos && host.find(']') == std::string_view::npos)
    host = host.substr(0, colon);
  if (host.size() <= domain.size() + 1 || host.substr(host.size() - domain.size()) != domain ||
      host[host.size() - domain.size() - 1] != '.')
    return std::nullopt;
  std::string_view label = host.substr(0, host.size() - domain.size() - 1);
  size_t dash = label.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto port = parse_port(label.substr(0, dash));
  if (!port || label.size() == dash + 1) return std::nullopt;
  return std::make_pair(*port, std::string(label.substr(dash + 1)));
}

std::optional<std::string> token_from_e2b_key(std::string_view key) {
  constexpr std::string_view kPrefix = "e2b_";
  if (key.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view hex = key.substr(kPrefix.size());
  if (hex.size() != 12 + 64 || !is_lower_hex(hex)) return std::nullopt;
  return "spt_" + std::string(hex.substr(0, 12)) + "_" + std::string(hex.substr(12));
}

std::string e2b_key_from_token(std::string_view token) {
  if (token.size() != 4 + 12 + 1 + 64 || token.substr(0, 4) != "spt_" || token[16] != '_')
    return "";
  return "e2b_" + std::string(token.substr(4, 12)) + std::string(token.substr(17));
}

std::string_view media_type(std::string_view content_type) {
  auto semi = content_type.find(';');
  if (semi != std::string_view::npos) content_type = content_type.substr(0, semi);
  while (!content_type.empty() && content_type.back() == ' ') content_type.remove_suffix(1);
  return content_type;
}

std::optional<std::string> header_param(std::string_view v, std::string_view name) {
  size_t pos = 0;
  while ((pos = v.find(';', pos)) != std::string_view::npos) {
    ++pos;
    while (pos < v.size() && v[pos] == ' ') ++pos;
    if (v.size() - pos > name.size() &&
        strncasecmp(v.data() + pos, name.data(), name.size()) == 0 && v[pos + name.size()] == '=') {
      pos += name.size() + 1;
      if (pos < v.size() && v[pos] == '"') {
        std::string out;
        for (++pos; pos < v.size() && v[pos] != '"'; ++pos) {
          if (v[pos] == '\\' && pos + 1 < v.size()) ++pos;
          out += v[pos];
        }
        return out;
      }
      size_t end = v.find(';', pos);
      std::string out(v.substr(pos, end == std::string_view::npos ? end : end - pos));
      while (!out.empty() && out.back() == ' ') out.pop_back();
      return out;
    }
  }
  return std::nullopt;
}

namespace {

// undici's FormData writes '"', CR and LF of a filename as %22, %0D, %0A.
std::string unescape_filename(std::string s) {
  for (auto [from, to] : {std::pair{"%22", '"'}, {"%0D", '\r'}, {"%0A", '\n'}}) {
    size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) s.replace(pos, 3, 1, to), ++pos;
  }
  return s;
}

}  // namespace

Result<std::vector<MultipartPart>> parse_multipart(std::string_view body,
                                                   std::string_view boundary) {
  if (boundary.empty())
    return fail(Code::kInvalidArgument, "multipart/form-data without a boundary");
  const std::string delim = "--" + std::string(boundary);
  const std::string next_delim = "\r\n" + delim;
  std::vector<MultipartPart> parts;
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos)
    return fail(Code::kInvalidArgument, "the multipart body has no part");
  for (;;) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;
    if (body.substr(pos, 2) != "\r\n")
      return fail(Code::kInvalidArgument, "malformed multipart body");
    pos += 2;
    size_t hend = body.find("\r\n\r\n", pos);
    if (hend == std::string_view::npos)
      return fail(Code::kInvalidArgument, "malformed multipart body: a part without headers' end");
    std::string_view headers = body.substr(pos, hend - pos);
    size_t data = hend + 4;
    size_t next = body.find(next_delim, data);
    if (next == std::string_view::npos)
      return fail(Code::kInvalidArgument, "malformed multipart body: a part is not closed");
    MultipartPart part{"", body.substr(data, next - data)};
    size_t hp = 0;
    while (hp < headers.size()) {
      size_t nl = headers.find("\r\n", hp);
      if (nl == std::string_view::npos) nl = headers.size();
      std::string_view line = headers.substr(hp, nl - hp);
      hp = nl + 2;
      if (line.size() > 20 && strncasecmp(line.data(), "content-disposition:", 20) == 0)
        part.filename = unescape_filename(header_param(line, "filename").value_or(""));
    }
    parts.push_back(part);
    pos = next + 2;
  }
  if (parts.empty()) return fail(Code::kInvalidArgument, "the multipart body has no file");
  return parts;
}

}  // namespace space::e2b

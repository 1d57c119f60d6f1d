// The upper-layer listing format (upper_listing.h): its encoder, used by space-upper-reader, and
// its strict parser, used by the daemon on what a reader of a guest-written disk printed.
#include "runtime/upper_listing.h"

#include <charconv>

#include "common/hex.h"

namespace space::runtime {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

Error bad(size_t line, std::string_view why) {
  return Error(Code::kProtocol, "the disk reader's listing is malformed at line " +
                                    std::to_string(line) + ": " + std::string(why));
}

// The next space-separated field of `rest` (which loses it and the space).
std::string_view field(std::string_view& rest) {
  size_t sp = rest.find(' ');
  std::string_view f = rest.substr(0, sp);
  rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
  return f;
}

template <class T>
bool number(std::string_view s, T& out) {
  if (s.empty() || s.size() > 20 || s[0] == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Decodes PATH and checks it is a relative path without empty, "." or ".." parts.
bool decode_path(std::string_view enc, std::string& out) {
  out.clear();
  for (size_t i = 0; i < enc.size(); ++i) {
    char c = enc[i];
    if (c == '%') {
      if (i + 2 >= enc.size()) return false;
      int hi = hex_value(enc[i + 1]), lo = hex_value(enc[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi << 4 | lo));
      i += 2;
    } else if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return false;
    } else {
      out.push_back(c);
    }
    if (out.size() > kMaxUpperPath) return false;
  }
  if (out.empty() || out.find('\0') != std::string::npos) return false;
  size_t start = 0;
  for (;;) {
    size_t slash = out.find('/', start);
    std::string_view part(out.data() + start,
                          (slash == std::string::npos ? out.size() : slash) - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

}  // namespace

std::string encode_path(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e || c == '%') {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string encode_entry(const UpperEntry& e) {
  std::string line = "e ";
  line.push_back(static_cast<char>(e.type));
  line += e.opaque ? " 1 " : " 0 ";
  line += std::to_string(e.size) + " " + std::to_string(e.mtime_ns) + " " + encode_path(e.path);
  line.push_back('\n');
  return line;
}

Result<std::vector<UpperEntry>> parse_listing(std::string_view text, size_t max_entries) {
  std::vector<UpperEntry> out;
  size_t line_no = 0;
  bool header = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return fail(bad(line_no + 1, "it ends without a newline"));
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    ++line_no;
    if (!header) {
      if (line != kListingHeader) return fail(bad(line_no, "no \"space-upper 1\" header"));
      header = true;
      continue;
    }
    std::string_view rest = line;
    std::string_view tag = field(rest);
    if (tag == "e") {
      if (out.size() >= max_entries)
        return fail(Code::kResourceExhausted, "more than " + std::to_string(max_entries) +
                                                  " changed paths; use `space cp` to inspect");
      UpperEntry e;
      std::string_view type = field(rest), opaque = field(rest), size = field(rest),
                       mtime = field(rest), path = rest;
      if (type == "d")
        e.type = UpperEntry::Type::kDir;
      else if (type == "w")
        e.type = UpperEntry::Type::kWhiteout;
      else if (type == "o")
        e.type = UpperEntry::Type::kOther;
      else
        return fail(bad(line_no, "unknown entry type"));
      if (opaque != "0" && opaque != "1") return fail(bad(line_no, "bad opaque flag"));
      e.opaque = opaque == "1";
      if (!number(size, e.size) || e.size < 0) return fail(bad(line_no, "bad size"));
      if (!number(mtime, e.mtime_ns)) return fail(bad(line_no, "bad mtime"));
      if (!decode_path(path, e.path)) return fail(bad(line_no, "bad path"));
      out.push_back(std::move(e));
    } else if (tag == "end") {
      uint64_t count = 0;
      if (!number(rest, count) || count != out.size())
        return fail(bad(line_no, "the entry count does not match"));
      if (!text.empty()) return fail(bad(line_no + 1, "lines after the end"));
      return out;
    } else if (tag == "limit") {
      return fail(Code::kResourceExhausted, "more than " + std::to_string(max_entries) +
                                                " changed paths; use `space cp` to inspect");
    } else if (tag == "error") {
      std::string why(rest.substr(0, 300));
      for (char& c : why)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
      return fail(Code::kProtocol, why.empty() ? std::string("the disk reader failed") : why);
    } else {
      return fail(bad(line_no, "unknown record"));
    }
  }
  return fail(Code::kProtocol, header ? "the disk reader's listing ended early (no end line)"
                                      : "the disk reader printed nothing");
}

}  // namespace space::runtime

// Manifests on disk: their JSON form, the seal (an HMAC-SHA256 kept by the daemon), validation,
// and diff. The file manifests/<id>.json is exactly nlohmann's dump of
//   {"mac": "<64 hex: HMAC-SHA256(key, canonical manifest)>", "manifest": <canonical manifest>}
// where the canonical manifest is the compact dump of this object (keys sorted):
//   format        1
//   id, parent    "snap_..." ("" parent: a full snapshot)
//   labels        {"sandbox": "sb_1", ...}           strings, UTF-8
//   created_at    seconds since the epoch (number)
//   logical_bytes, new_bytes, reused_files           unsigned
//   skipped       [<bytes>, ...]                     what take() left out, with why
//   entries       [entry, ...] sorted by path (bytewise), the root "" first
// entry:
//   path          <bytes> relative, "" for the root
//   type          "dir" | "file" | "symlink" | "whiteout" | "other"
//   mode          permission bits (07777); "other" adds S_IFIFO or S_IFSOCK
//   uid, gid      host ids; mtime_ns (signed)
//   xattrs        [[<bytes> name, "<hex value>"], ...]  (absent when none)
//   file only:    size, chunks ["<64 hex>", ...], ctime_ns, ino, dev, link <bytes> (the first
//                 path of a hardlinked file; then chunks is empty)
//   symlink only: target <bytes>
// <bytes> is a JSON string when the bytes are valid UTF-8, else {"hex": "<hex>"} (file names
// are bytes, JSON strings are UTF-8).
//
// unseal() checks the layout and the MAC over the exact bytes before it parses anything; a
// manifest whose MAC holds is still parsed as untrusted (types, paths, references), since the
// MAC only says the daemon wrote it.
#include <openssl/crypto.h>
#include <sys/stat.h>

#include <optional>
#include <unordered_map>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

using nlohmann::json;

constexpr int kFormat = 1;
constexpr size_t kMaxJsonDepth = 16;
constexpr std::string_view kSealPrefix = R"({"mac":")";
constexpr std::string_view kSealMiddle = R"(","manifest":)";
constexpr size_t kMacHex = 64;

const char* type_name(Entry::Type t) {
  switch (t) {
    case Entry::Type::kDir:
      return "dir";
    case Entry::Type::kFile:
      return "file";
    case Entry::Type::kSymlink:
      return "symlink";
    case Entry::Type::kWhiteout:
      return "whiteout";
    case Entry::Type::kOther:
      return "other";
  }
  return "?";
}

bool type_from(const std::string& s, Entry::Type* t) {
  for (auto c : {Entry::Type::kDir, Entry::Type::kFile, Entry::Type::kSymlink,
                 Entry::Type::kWhiteout, Entry::Type::kOther}) {
    if (s == type_name(c)) {
      *t = c;
      return true;
    }
  }
  return false;
}

json bytes_json(const std::string& s) {
  if (valid_utf8(s)) return s;
  return json{{"hex", to_hex(s.data(), s.size())}};
}

bool bytes_from(const json& j, std::string* out) {
  if (j.is_string()) {
    *out = j.get<std::string>();
    return true;
  }
  if (j.is_object() && j.size() == 1 && j.contains("hex") && j["hex"].is_string())
    return from_hex(j["hex"].get<std::string>(), out);
  return false;
}

// Field readers for untrusted JSON: each says which field of what was wrong.
class Fields {
 public:
  Fields(const json& obj, std::string what) : obj_(obj), what_(std::move(what)) {}

  Result<const json*> get(const char* key, bool required = true) const {
    if (!obj_.is_object()) return bad("is not an object");
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (required) return bad(std::string("has no field \"") + key + "\"");
      return nullptr;
    }
    return &*it;
  }
  Result<uint64_t> u64(const char* key, bool required = true) const {
    const json* j = TRY(get(key, required));
    if (!j) return 0;
    if (j->is_number_unsigned()) return j->get<uint64_t>();
    if (j->is_number_integer() && j->get<int64_t>() >= 0) return j->get<uint64_t>();
    return bad(std::string("field \"") + key + "\" is not an unsigned integer");
  }
  Result<int64_t> i64(const char* key) const {
    const json* j = TRY(get(key));
    if (j->is_number_unsigned() && j->get<uint64_t>() > INT64_MAX)
      return bad(std::string("field \"") + key + "\" is out of range");
    if (j->is_number_integer()) return j->get<int64_t>();
    return bad(std::string("field \"") + key + "\" is not an integer");
  }
  Result<std::string> bytes(const char* key, bool required = true) const {
    const json* j = TRY(get(key, required));
    if (!j) return std::string();
    std::string out;
    if (!bytes_from(*j, &out)) return bad(std::string("field \"") + key + "\" is not a string");
    return out;
  }
  std::unexpected<Error> bad(const std::string& why) const {
    return fail(Code::kProtocol, what_ + " " + why);
  }

 private:
  const json& obj_;
  std::string what_;
};

Result<Entry> entry_from(const json& j, size_t index) {
  Fields f(j, "entry " + std::to_string(index));
  Entry e;
  e.path = TRY(f.bytes("path"));
  Fields g(j, "entry " + std::to_string(index) + " (\"" + e.path.substr(0, 200) + "\")");
  const json* type = TRY(g.get("type"));
  if (!type->is_string() || !type_from(type->get<std::string>(), &e.type))
    return g.bad("has an unknown type");
  uint64_t mode = TRY(g.u64("mode"));
  uint64_t uid = TRY(g.u64("uid"));
  uint64_t gid = TRY(g.u64("gid"));
  if (mode > UINT32_MAX || uid > UINT32_MAX || gid > UINT32_MAX)
    return g.bad("has a mode, uid or gid out of range");
  e.mode = static_cast<uint32_t>(mode);
  e.uid = static_cast<uint32_t>(uid);
  e.gid = static_cast<uint32_t>(gid);
  e.mtime_ns = TRY(g.i64("mtime_ns"));
  if (const json* xs = TRY(g.get("xattrs", false))) {
    if (!xs->is_array()) return g.bad("field \"xattrs\" is not an array");
    for (const json& x : *xs) {
      std::string name, value;
      if (!x.is_array() || x.size() != 2 || !bytes_from(x[0], &name) || !x[1].is_string() ||
          !from_hex(x[1].get<std::string>(), &value))
        return g.bad("has a malformed xattr");
      if (!e.xattrs.emplace(std::move(name), std::move(value)).second)
        return g.bad("has a duplicate xattr");
    }
  }
  if (e.type == Entry::Type::kFile) {
    e.size = TRY(g.u64("size"));
    e.ctime_ns = TRY(g.i64("ctime_ns"));
    e.ino = TRY(g.u64("ino"));
    e.dev = TRY(g.u64("dev"));
    e.hardlink_to = TRY(g.bytes("link", false));
    const json* chunks = TRY(g.get("chunks"));
    if (!chunks->is_array()) return g.bad("field \"chunks\" is not an array");
    for (const json& c : *chunks) {
      if (!c.is_string() || !is_chunk_id(c.get<std::string>()))
        return g.bad("has a chunk id that is not 64 lowercase hex digits");
      e.chunks.push_back(c.get<std::string>());
    }
  }
  if (e.type == Entry::Type::kSymlink) e.target = TRY(g.bytes("target"));
  return e;
}

// Nesting depth of a JSON text, without parsing it (nlohmann's dump and destructor recurse).
size_t json_depth(std::string_view text) {
  size_t depth = 0, max = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max = std::max(max, ++depth);
    else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return max;
}

bool same_metadata(const Entry& a, const Entry& b) {
  if (a.type != b.type || a.mode != b.mode || a.uid != b.uid || a.gid != b.gid ||
      a.target != b.target || a.xattrs != b.xattrs)
    return false;
  if (a.type == Entry::Type::kDir) return true;  // a directory's mtime moves with its entries
  if (a.mtime_ns != b.mtime_ns) return false;
  if (a.type != Entry::Type::kFile) return true;
  if (a.size != b.size) return false;
  // Both sides from take(): compare content too (an edit that kept size and mtime).
  if (!a.chunks.empty() && !b.chunks.empty() && a.chunks != b.chunks) return false;
  return true;
}

}  // namespace

namespace {

json entry_json(const Entry& e) {
  json j{{"path", bytes_json(e.path)},
         {"type", type_name(e.type)},
         {"mode", e.mode},
         {"uid", e.uid},
         {"gid", e.gid},
         {"mtime_ns", e.mtime_ns}};
  if (!e.xattrs.empty()) {
    json xs = json::array();
    for (const auto& [k, v] : e.xattrs) xs.push_back({bytes_json(k), to_hex(v.data(), v.size())});
    j["xattrs"] = std::move(xs);
  }
  if (e.type == Entry::Type::kFile) {
    j["size"] = e.size;
    j["chunks"] = e.chunks;
    j["ctime_ns"] = e.ctime_ns;
    j["ino"] = e.ino;
    j["dev"] = e.dev;
    if (!e.hardlink_to.empty()) j["link"] = bytes_json(e.hardlink_to);
  }
  if (e.type == Entry::Type::kSymlink) j["target"] = bytes_json(e.target);
  return j;
}

// Everything but the entries (an empty array in their place).
json header_json(const Manifest& m) {
  json skipped = json::array();
  for (const std::string& s : m.skipped) skipped.push_back(bytes_json(s));
  return json{{"format", kFormat},
              {"id", m.id},
              {"parent", m.parent},
              {"labels", m.labels},
              {"created_at", m.created_at},
              {"logical_bytes", m.logical_bytes},
              {"new_bytes", m.new_bytes},
              {"reused_files", m.reused_files},
              {"skipped", std::move(skipped)},
              {"entries", json::array()}};
}

// The header's fields, as from_json reads them.
Result<void> header_from(const json& j, Manifest* out);

}  // namespace

json to_json(const Manifest& m) {
  json j = header_json(m);
  json& entries = j["entries"];
  for (const Entry& e : m.entries) entries.push_back(entry_json(e));
  return j;
}

std::string canonical_dump(const Manifest& m) {
  // Byte for byte to_json(m).dump() (keys are sorted, so "entries" is the header's second key
  // and its empty array the first "entries":[] of the text), without holding the whole tree as
  // a JSON document: a manifest of a million entries would cost gigabytes as one.
  std::string head = header_json(m).dump();
  constexpr std::string_view kSlot = R"("entries":[])";
  size_t at = head.find(kSlot);
  std::string out;
  out.reserve(head.size() + m.entries.size() * 200);
  out.append(head, 0, at + kSlot.size() - 1);
  for (size_t i = 0; i < m.entries.size(); ++i) {
    if (i) out += ',';
    out += entry_json(m.entries[i]).dump();
  }
  out.append(head, at + kSlot.size() - 1);
  return out;
}

namespace {

Result<void> header_from(const json& j, Manifest* out) {
  Fields f(j, "manifest");
  Manifest& m = *out;
  if (TRY(f.u64("format")) != kFormat) return f.bad("has an unknown format");
  const json* id = TRY(f.get("id"));
  const json* parent = TRY(f.get("parent"));
  if (!id->is_string() || !parent->is_string()) return f.bad("has a non-string id or parent");
  m.id = id->get<std::string>();
  m.parent = parent->get<std::string>();
  const json* labels = TRY(f.get("labels"));
  if (!labels->is_object()) return f.bad("field \"labels\" is not an object");
  for (const auto& [k, v] : labels->items()) {
    if (!v.is_string()) return f.bad("has a non-string label");
    m.labels[k] = v.get<std::string>();
  }
  const json* created = TRY(f.get("created_at"));
  if (!created->is_number()) return f.bad("field \"created_at\" is not a number");
  m.created_at = created->get<double>();
  m.logical_bytes = TRY(f.u64("logical_bytes"));
  m.new_bytes = TRY(f.u64("new_bytes"));
  m.reused_files = TRY(f.u64("reused_files"));
  const json* skipped = TRY(f.get("skipped"));
  if (!skipped->is_array()) return f.bad("field \"skipped\" is not an array");
  for (const json& s : *skipped) {
    std::string v;
    if (!bytes_from(s, &v)) return f.bad("has a malformed \"skipped\" item");
    m.skipped.push_back(std::move(v));
  }
  return {};
}

}  // namespace

Result<Manifest> from_json(const json& j, const StoreOptions& options) {
  Fields f(j, "manifest");
  Manifest m;
  TRY_VOID(header_from(j, &m));
  const json* entries = TRY(f.get("entries"));
  if (!entries->is_array()) return f.bad("field \"entries\" is not an array");
  if (entries->size() > options.max_entries)
    return f.bad("has more than " + std::to_string(options.max_entries) + " entries");
  m.entries.reserve(entries->size());
  for (size_t i = 0; i < entries->size(); ++i)
    m.entries.push_back(TRY(entry_from((*entries)[i], i)));
  TRY_VOID(validate(m, options));
  return m;
}

Result<void> validate(const Manifest& m, const StoreOptions& options) {
  if (!valid_id(m.id)) return fail(Code::kProtocol, "manifest has an invalid id");
  if (!m.parent.empty() && !valid_id(m.parent))
    return fail(Code::kProtocol, "manifest has an invalid parent id");
  for (const auto& [k, v] : m.labels)
    if (!valid_utf8(k) || !valid_utf8(v))
      return fail(Code::kProtocol, "manifest has a label that is not UTF-8");
  if (m.entries.empty() || !m.entries[0].path.empty() || m.entries[0].type != Entry::Type::kDir)
    return fail(Code::kProtocol, "manifest does not start with its root directory");
  if (m.entries.size() > options.max_entries)
    return fail(Code::kProtocol,
                "manifest has more than " + std::to_string(options.max_entries) + " entries");
  std::unordered_map<std::string_view, size_t> index;
  index.reserve(m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const Entry& e = m.entries[i];
    auto bad = [&](std::string_view why) {
      return fail(Code::kProtocol,
                  "manifest entry \"" + e.path.substr(0, 200) + "\" " + std::string(why));
    };
    TRY_VOID(check_path(e.path, options));
    if (i > 0) {
      if (!(m.entries[i - 1].path < e.path)) return bad("is out of order or repeated");
      auto parent = index.find(parent_of(e.path));
      if (parent == index.end() || m.entries[parent->second].type != Entry::Type::kDir)
        return bad("is not beneath a directory of the manifest");
    }
    uint32_t fmt = e.mode & S_IFMT;
    if (e.type == Entry::Type::kOther) {
      if (fmt != S_IFIFO && fmt != S_IFSOCK) return bad("is neither a fifo nor a socket");
    } else if (fmt != 0) {
      return bad("has file-type bits in its mode");
    }
    if ((e.mode & ~(S_IFMT | 07777u)) != 0) return bad("has an invalid mode");
    for (const auto& [name, value] : e.xattrs) {
      if (!kept_xattr(name) || name.size() > 255 || name.find('\0') != std::string::npos)
        return bad("has an xattr outside the kept namespaces");
      if (value.size() > 65536) return bad("has an xattr value over 64 KiB");
    }
    if (e.type != Entry::Type::kFile && (!e.chunks.empty() || !e.hardlink_to.empty()))
      return bad("has chunks or a hardlink but is not a file");
    if (e.type != Entry::Type::kSymlink && !e.target.empty())
      return bad("has a target but is not a symlink");
    if (e.type == Entry::Type::kSymlink &&
        (e.target.empty() || e.target.size() > options.max_path ||
         e.target.find('\0') != std::string::npos))
      return bad("has an empty, overlong or NUL-containing target");
    if (e.type == Entry::Type::kFile) {
      for (const std::string& c : e.chunks)
        if (!is_chunk_id(c)) return bad("has a malformed chunk id");
      if (!e.hardlink_to.empty()) {
        auto first = index.find(e.hardlink_to);
        if (first == index.end()) return bad("is a hardlink to no earlier path");
        const Entry& f = m.entries[first->second];
        if (f.type != Entry::Type::kFile || !f.hardlink_to.empty())
          return bad("is a hardlink to something other than a file");
        if (!e.chunks.empty() || e.size != f.size) return bad("is a hardlink with its own data");
      } else {
        if ((e.size == 0) != e.chunks.empty()) return bad("has chunks that cannot hold its size");
        if (e.chunks.size() > UINT64_MAX / kMaxChunk || e.size > e.chunks.size() * kMaxChunk)
          return bad("has chunks that cannot hold its size");
      }
    }
    index.emplace(e.path, i);
  }
  return {};
}

std::string seal(const Manifest& m, const std::string& key) {
  std::string canonical = canonical_dump(m);
  return std::string(kSealPrefix) + hmac_sha256_hex(key, canonical) + std::string(kSealMiddle) +
         canonical + "}";
}

Result<Manifest> unseal(const std::string& text, const std::string& id, const std::string& key,
                        const StoreOptions& options) {
  const std::string what = "manifest " + id;
  const size_t head = kSealPrefix.size() + kMacHex + kSealMiddle.size();
  if (text.size() < head + 2 || !text.starts_with(kSealPrefix) ||
      text.compare(kSealPrefix.size() + kMacHex, kSealMiddle.size(), kSealMiddle) != 0 ||
      text.back() != '}')
    return fail(Code::kProtocol, what + " is truncated or malformed (not a sealed manifest)");
  std::string given, expected;
  if (!from_hex(std::string_view(text).substr(kSealPrefix.size(), kMacHex), &given))
    return fail(Code::kProtocol, what + " is malformed (its MAC is not hex)");
  std::string_view body = std::string_view(text).substr(head, text.size() - head - 1);
  from_hex(hmac_sha256_hex(key, body), &expected);
  if (given.size() != expected.size() ||
      CRYPTO_memcmp(given.data(), expected.data(), given.size()) != 0)
    return fail(Code::kProtocol,
                what +
                    " failed its MAC check: it was altered, truncated, or sealed with "
                    "another key");
  if (json_depth(body) > kMaxJsonDepth)
    return fail(Code::kProtocol, what + " is nested too deeply");
  // Entries are converted as the parser meets them and dropped from the document, so memory
  // stays at the Entry structs (not a JSON tree of the whole manifest on top).
  std::vector<Entry> entries;
  std::optional<Error> bad;
  bool in_entries = false, too_many = false;
  json::parser_callback_t collect = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (depth == 1 && event == E::key) in_entries = parsed == "entries";
    if (!in_entries) return true;
    if (depth == 1 && event == E::array_end) {
      in_entries = false;
      return true;
    }
    if (depth == 2 && event == E::object_end) {
      if (bad || too_many) return false;
      if (entries.size() >= options.max_entries) {
        too_many = true;
        return false;
      }
      auto e = entry_from(parsed, entries.size());
      if (!e)
        bad = std::move(e.error());
      else
        entries.push_back(std::move(*e));
      return false;
    }
    return true;
  };
  json j = json::parse(body, collect, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(Code::kProtocol, what + " does not parse as JSON");
  if (bad) return fail(std::move(*bad).wrap(what));
  if (too_many)
    return fail(Code::kProtocol,
                what + " has more than " + std::to_string(options.max_entries) + " entries");
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array() || !j["entries"].empty())
    return fail(Code::kProtocol, what + " has a malformed \"entries\" field");
  Result<Manifest> m = Manifest{};
  if (auto h = header_from(j, &*m); !h) return fail(std::move(h.error()).wrap(what));
  m->entries = std::move(entries);
  if (auto v = validate(*m, options); !v) return fail(std::move(v.error()).wrap(what));
  if (m->id != id) return fail(Code::kProtocol, what + " holds snapshot " + m->id);
  return m;
}

json diff(const Manifest* from, const Manifest& to) {
  // In an overlay upper directory a whiteout is a deletion; absent means "as in the image".
  std::map<std::string_view, const Entry*> before, after;
  if (from)
    for (const Entry& e : from->entries) before[e.path] = &e;
  for (const Entry& e : to.entries) after[e.path] = &e;
  json added = json::array(), changed = json::array(), deleted = json::array();
  auto is_wh = [](const Entry* e) { return e && e->type == Entry::Type::kWhiteout; };
  auto abs = [](std::string_view p) { return "/" + std::string(p); };
  auto a = before.begin();
  auto b = after.begin();
  while (a != before.end() || b != after.end()) {
    std::string_view path;
    const Entry *x = nullptr, *y = nullptr;
    if (b == after.end() || (a != before.end() && a->first < b->first)) {
      path = a->first, x = a->second, ++a;
    } else if (a == before.end() || b->first < a->first) {
      path = b->first, y = b->second, ++b;
    } else {
      path = a->first, x = a->second, y = b->second, ++a, ++b;
    }
    if (path.empty()) continue;  // the root
    const bool x_present = x && !is_wh(x), y_present = y && !is_wh(y);
    if (y_present && !x_present) {
      added.push_back(abs(path));  // new, or recreated after a whiteout
    } else if (!y_present && x_present) {
      deleted.push_back(abs(path));
    } else if (y_present && x_present) {
      if (!same_metadata(*x, *y)) changed.push_back(abs(path));
    } else if (is_wh(y) && !x) {
      deleted.push_back(abs(path));  // an image file deleted since
    } else if (is_wh(x) && !y) {
      added.push_back(abs(path));  // the image file shows again
    }
  }
  // Bytewise order of relative paths equals that of the absolute ones.
  return json{{"added", std::move(added)},
              {"changed", std::move(changed)},
              {"deleted", std::move(deleted)}};
}

}  // namespace space::snapshot::detail

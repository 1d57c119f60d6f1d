// Builders for the image tests: tar streams (plain, gzip, zstd) written with libarchive's writer,
// which writes whatever name, link or type it is given (hostile ones included), and OCI layouts
// / docker-save directories put together blob by blob.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <locale.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "image/sha256.h"

namespace space::image::test {

struct TarEntry {
  std::string name;
  char type = 'f';  // f file, d dir, l symlink, h hard link, c char dev, b block dev, p fifo
  std::string data;
  std::string link;  // symlink target or hard link target
  unsigned mode = 0644;
  int64_t uid = 0, gid = 0;
  int64_t mtime = 1'700'000'000;
  bool utf8 = false;  // the name is UTF-8 (written as pax "path", as tools write non-ASCII names)
};

enum class Compression { kNone, kGzip, kZstd };

inline std::string make_tar(const std::vector<TarEntry>& entries,
                            Compression c = Compression::kNone) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (c == Compression::kGzip) archive_write_add_filter_gzip(a);
  if (c == Compression::kZstd) archive_write_add_filter_zstd(a);
  archive_write_set_bytes_in_last_block(a, 1);
  auto write_cb = [](archive*, void* ctx, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  EXPECT_EQ(archive_write_open(a, &out, nullptr, write_cb, nullptr), ARCHIVE_OK);
  for (const auto& t : entries) {
    archive_entry* e = archive_entry_new();
    // A UTF-8 name is written under C.UTF-8, so the pax header carries it as UTF-8 (the way
    // tools write non-ASCII names); other names are written as raw bytes.
    locale_t utf8 = t.utf8 ? ::newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t{}) : locale_t{};
    locale_t old = utf8 ? ::uselocale(utf8) : locale_t{};
    archive_entry_set_pathname(e, t.name.c_str());
    archive_entry_set_uid(e, t.uid);
    archive_entry_set_gid(e, t.gid);
    archive_entry_set_mtime(e, t.mtime, 0);
    unsigned type = AE_IFREG;
    switch (t.type) {
      case 'd':
        type = AE_IFDIR;
        break;
      case 'l':
        type = AE_IFLNK;
        archive_entry_set_symlink(e, t.link.c_str());
        break;
      case 'c':
        type = AE_IFCHR;
        archive_entry_set_rdev(e, makedev(1, 3));
        break;
      case 'b':
        type = AE_IFBLK;
        archive_entry_set_rdev(e, makedev(8, 0));
        break;
      case 'p':
        type = AE_IFIFO;
        break;
      default:
        break;
    }
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, t.mode);
    if (t.type == 'h') archive_entry_set_hardlink(e, t.link.c_str());
    archive_entry_set_size(e, t.type == 'f' ? static_cast<la_int64_t>(t.data.size()) : 0);
    // ARCHIVE_WARN: a UTF-8 name the C locale cannot write in the ustar header (the pax one has
    // it).
    EXPECT_GE(archive_write_header(a, e), ARCHIVE_WARN)
        << t.name << ": " << archive_error_string(a);
    if (t.type == 'f' && !t.data.empty()) {
      EXPECT_EQ(archive_write_data(a, t.data.data(), t.data.size()),
                static_cast<la_ssize_t>(t.data.size()));
    }
    archive_entry_free(e);
    if (utf8) {
      ::uselocale(old);
      ::freelocale(utf8);
    }
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::string hex_of(const std::string& digest) { return digest.substr(7); }

// An OCI image layout under construction.
class Layout {
 public:
  explicit Layout(std::filesystem::path dir) : dir_(std::move(dir)) {
    write_file(dir_ / "oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  }
  // Stores a blob; returns its descriptor.
  nlohmann::json blob(const std::string& bytes, const std::string& media_type) {
    std::string d = sha256_digest(bytes);
    write_file(dir_ / "blobs/sha256" / hex_of(d), bytes);
    return {{"mediaType", media_type}, {"digest", d}, {"size", bytes.size()}};
  }
  // A config blob with these diff_ids and "config" object.
  nlohmann::json config(const std::vector<std::string>& diff_ids, nlohmann::json cfg = nullptr,
                        const std::string& arch = "") {
    nlohmann::json j = {{"os", "linux"}, {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
    if (!arch.empty()) j["architecture"] = arch;
    if (!cfg.is_null()) j["config"] = cfg;
    return blob(j.dump(), "application/vnd.oci.image.config.v1+json");
  }
  nlohmann::json manifest(const nlohmann::json& config, const std::vector<nlohmann::json>& layers) {
    nlohmann::json m = {{"schemaVersion", 2},
                        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                        {"config", config},
                        {"layers", layers}};
    return blob(m.dump(), "application/vnd.oci.image.manifest.v1+json");
  }
  void index(const std::vector<nlohmann::json>& manifests) {
    nlohmann::json i = {{"schemaVersion", 2},
                        {"mediaType", "application/vnd.oci.image.index.v1+json"},
                        {"manifests", manifests}};
    write_file(dir_ / "index.json", i.dump());
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

inline nlohmann::json with_platform(nlohmann::json d, const std::string& arch,
                                    const std::string& variant = "") {
  d["platform"] = {{"os", "linux"}, {"architecture", arch}};
  if (!variant.empty()) d["platform"]["variant"] = variant;
  return d;
}

inline constexpr const char* kTarGzip = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr const char* kTar = "application/vnd.oci.image.layer.v1.tar";

}  // namespace space::image::test

// libFuzzer target: layer blobs (src/image/layer.cc, tree.cc) — the tar stream, plain or
// compressed, that apply_layer decodes and writes into an image's tree. The first byte's bits:
//   bit 0: keep_setuid;
//   bit 1: the rest is two layers (split in the middle), applied one after the other onto the
//          same tree, so whiteouts, opaque directories, links and symlinks of the first meet
//          entries of the second.
// Each input unpacks into a fresh <box>/root-N beside <box>/outside, which holds one sentinel.
// Properties checked besides "no crash": nothing outside the root is created, changed or
// removed (the box holds root-N, outside and the blobs; outside holds the sentinel with its
// content); the tree holds no device node and, without keep_setuid, no setuid or setgid
// non-directory; totals never exceed the limits.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "image/layer.h"

namespace fs = std::filesystem;
namespace si = space::image;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

constexpr si::Limits kLimits{
    .max_layer_bytes = 8 << 20, .max_total_bytes = 12 << 20, .max_entries = 512, .max_ratio = 200};

// Made once, removed at exit (leaked, so it is still there when the atexit handler runs).
const fs::path& box() {
  static const fs::path* dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "space-fuzz-layer-XXXXXX").string();
    check(::mkdtemp(tmpl.data()) != nullptr);
    auto* d = new fs::path(tmpl);
    fs::create_directories(*d / "outside");
    std::ofstream(*d / "outside" / "sentinel") << "sentinel";
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(box(), ec);
    });
    return d;
  }();
  return *dir;
}

void write_blob(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void check_outside_untouched(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(box())) {
    auto name = e.path().filename().string();
    check(name.starts_with("root-") || name == "outside" || name.starts_with("blob"));
  }
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(box() / "outside")) {
    check(e.path().filename() == "sentinel");
    ++n;
  }
  check(n == 1);
  std::ifstream f(box() / "outside" / "sentinel");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  check(s == "sentinel");
}

void check_tree(const fs::path& root, bool keep_setuid) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    check(!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode));
    if (!keep_setuid && !S_ISDIR(st.st_mode)) check((st.st_mode & (S_ISUID | S_ISGID)) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static uint64_t run = 0;
  bool keep_setuid = data[0] & 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string_view> layers;
  if (data[0] & 2) {
    layers = {rest.substr(0, rest.size() / 2), rest.substr(rest.size() / 2)};
  } else {
    layers = {rest};
  }
  fs::path root = box() / ("root-" + std::to_string(run++));
  fs::create_directory(root);
  space::UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  check(root_fd.valid());
  si::Totals totals;
  for (size_t i = 0; i < layers.size(); ++i) {
    fs::path blob = box() / ("blob" + std::to_string(i));
    write_blob(blob, layers[i]);
    si::Layer layer{"", "", 0, "", blob};
    auto r = si::apply_layer(blob, layer, root_fd.get(), kLimits, totals, keep_setuid);
    check(totals.bytes <= kLimits.max_total_bytes && totals.entries <= kLimits.max_entries);
    if (!r) break;
  }
  check_outside_untouched(root);
  check_tree(root, keep_setuid);
  root_fd.reset();
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}

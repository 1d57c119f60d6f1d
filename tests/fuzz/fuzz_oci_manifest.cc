// libFuzzer target: the JSON an image archive carries (src/image/oci_parse.cc, config.cc), all of
// it untrusted. The first byte picks the parser for the rest:
//   0: an image config blob (parse_config_blob);
//   1: an index (index.json or an index blob), choosing for linux/amd64 and linux/arm64/v8;
//   2: a manifest whose descriptor said it is an OCI manifest (3: a Docker v2 manifest);
//   4: docker-save's manifest.json;
//   5: a stored ImageConfig (ImageConfig::from_json).
// Properties checked besides "no crash, no exception": a chosen descriptor has a sha256 digest
// and a manifest or index media type, and matches the platform when it names one; a manifest's
// layers are all of known media types with sha256 digests and at most kMaxLayers; docker-save
// paths are clean (cleaning them again is the identity); an accepted config has no NUL in the
// strings that reach execve, every Env entry is NAME=VALUE, and from_json(to_json()) gives it
// back.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "image/layer.h"
#include "image/oci.h"
#include "image/oci_parse.h"

namespace si = space::image;
namespace sd = space::image::detail;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_config(const si::ImageConfig& c) {
  for (const auto& e : c.env) {
    auto eq = e.find('=');
    check(eq != std::string::npos && eq > 0 && e.find('\0') == std::string::npos);
  }
  for (const auto* list : {&c.entrypoint, &c.cmd})
    for (const auto& a : *list) check(a.find('\0') == std::string::npos);
  check(c.user.find('\0') == std::string::npos);
  check(c.working_dir.empty() || c.working_dir[0] == '/');
  auto back = si::ImageConfig::from_json(c.to_json());
  check(back.has_value());
  check(back->env == c.env && back->working_dir == c.working_dir && back->user == c.user &&
        back->entrypoint == c.entrypoint && back->cmd == c.cmd && back->labels == c.labels);
}

void check_descriptor(const sd::Descriptor& d) { check(si::valid_sha256_digest(d.digest)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto c = si::parse_config_blob(text);
      if (!c) break;
      for (const auto& id : c->diff_ids) check(si::valid_sha256_digest(id));
      check(c->diff_ids.size() <= si::kMaxLayers);
      check_config(c->config);
      break;
    }
    case 1: {
      for (const si::Platform& want :
           {si::Platform{"linux", "amd64", ""}, si::Platform{"linux", "arm64", "v8"}}) {
        auto d = sd::choose_manifest(text, want);
        if (!d) continue;
        check_descriptor(*d);
        check(sd::is_manifest_type(d->media_type) || sd::is_index_type(d->media_type));
        if (d->has_platform)
          check(d->platform.os == want.os && d->platform.architecture == want.architecture);
      }
      break;
    }
    case 2:
    case 3: {
      auto type = data[0] % 6 == 2 ? sd::kOciManifest : sd::kDockerManifest;
      auto m = sd::parse_manifest(text, type);
      if (!m) break;
      check_descriptor(m->config);
      check(sd::is_config_type(m->config.media_type));
      check(m->layers.size() <= si::kMaxLayers);
      for (const auto& l : m->layers) {
        check_descriptor(l);
        check(!l.media_type.empty() && space::image::known_layer_media_type(l.media_type));
      }
      break;
    }
    case 4: {
      auto m = sd::parse_docker_manifest(text);
      if (!m) break;
      check(m->layers.size() <= si::kMaxLayers);
      auto again = sd::clean_relative_path(m->config);
      check(again.has_value() && *again == m->config);
      for (const auto& p : m->layers) {
        auto a = sd::clean_relative_path(p);
        check(a.has_value() && *a == p);
      }
      break;
    }
    case 5: {
      auto j = sd::parse_json(text);
      if (!j) break;
      auto c = si::ImageConfig::from_json(*j);
      if (c) check_config(*c);
      break;
    }
  }
  return 0;
}

// The parsers behind resolve() (oci.cc), apart from the files they read so that the fuzz target
// (tests/fuzz/fuzz_oci_manifest.cc) can feed them bytes directly: an index's manifests and the
// choice among them, a manifest's config and layers, docker-save's manifest.json. Each takes
// untrusted text and returns typed values or kInvalidArgument with the field and the reason.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "image/oci.h"

namespace space::image::detail {

inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciConfig = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kDockerList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kDockerConfig = "application/vnd.docker.container.image.v1+json";

bool is_index_type(std::string_view media_type);
bool is_manifest_type(std::string_view media_type);
bool is_config_type(std::string_view media_type);

struct Descriptor {
  std::string media_type;
  std::string digest;  // valid_sha256_digest
  uint64_t size = 0;
  bool has_platform = false;
  Platform platform;
};

// Text to JSON: at most kMaxJsonBlobBytes, nested at most kMaxJsonNesting, never throws.
Result<nlohmann::json> parse_json(std::string_view text);

// One descriptor object; `what` names it in errors ("manifests[2]").
Result<Descriptor> parse_descriptor(const nlohmann::json& j, const std::string& what);

// The entry of an index (index.json, or an index blob) to follow for `want`: the first whose
// platform matches, else the only one without a platform; entries of other media types than
// manifests and indexes are passed over (attestations, signatures), and an index with none
// left is refused.
Result<Descriptor> choose_manifest(std::string_view index_text, const Platform& want);

struct ManifestDoc {
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first; media types checked known
};
// A manifest blob whose descriptor said `media_type`.
Result<ManifestDoc> parse_manifest(std::string_view text, std::string_view media_type);

struct DockerSaveDoc {
  std::string config;               // clean relative paths inside the archive
  std::vector<std::string> layers;  // bottom first
};
Result<DockerSaveDoc> parse_docker_manifest(std::string_view text);

// "a/./b//c" -> "a/b/c"; refuses "", an absolute path, "..", NUL, or more than 4096 bytes.
Result<std::string> clean_relative_path(std::string_view p);

}  // namespace space::image::detail

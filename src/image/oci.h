// Reading an OCI image layout or a `docker save` archive that has been unpacked into a staging
// directory: which format it is, which manifest serves this host's platform, the layers it names
// (bottom first, each blob's sha256 and size verified), and the parts of the image config SPACE
// honours. Every byte read here is untrusted (an uploaded archive): JSON is parsed without
// exceptions and with bounded nesting, every field's type is checked before use, blobs are named
// only by validated digests (never by a path taken from the input, except docker-save's
// manifest.json paths, which must be plain relative names inside the directory), and an index
// that leads back to itself or nests too deep is refused.
//
// For engineer I2: names as in the split. Additions: Layer::path (where the layer's blob lies:
// hand it to apply_layer as `blob`), Resolved::config_digest, the Limits defaults
// (kDefaultLimits, in layer.h), and ImageConfig::from_json accepting both its stored form and
// the OCI spelling of an image config's "config" object. resolve() checks the size and presence
// of layer blobs; their sha256 (and the diff_id) is checked by apply_layer as it reads them, so
// discard the tree whenever apply_layer fails.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"

namespace space::image {

// The image config's "config" object, as far as SPACE honours it.
struct ImageConfig {
  std::vector<std::string> env;  // "K=V", in the image's order
  std::string working_dir, user;
  std::vector<std::string> entrypoint, cmd;
  std::map<std::string, std::string> labels;

  // The stored form (kept with the image record): {"env":[...],"working_dir":"...","user":"...",
  // "entrypoint":[...],"cmd":[...],"labels":{...}}; empty fields are left out.
  nlohmann::json to_json() const;
  // The stored form back. Also accepts the OCI spelling ("Env", "WorkingDir", "User",
  // "Entrypoint", "Cmd", "Labels"), so it may be handed an image config's "config" object.
  // Refuses wrong types (kInvalidArgument), never throws.
  static Result<ImageConfig> from_json(const nlohmann::json& j);
};

// One layer of the chosen manifest.
struct Layer {
  std::string digest;          // "sha256:<64 hex>" of the blob as stored (compressed)
  std::string media_type;      // the manifest's mediaType for it ("" for docker-save: by magic)
  uint64_t size = 0;           // the blob's size in bytes (docker-save: the file's size)
  std::string diff_id;         // "sha256:<64 hex>" of the uncompressed tar (the config's rootfs)
  std::filesystem::path path;  // where the blob lies (dir/blobs/sha256/<hex>, or docker-save's)
};

struct Resolved {
  std::string format;           // "oci" | "docker"
  std::string manifest_digest;  // sha256:... of the chosen manifest ("" for docker-save)
  std::string config_digest;    // sha256:... of the image config blob
  ImageConfig config;
  std::vector<Layer> layers;  // bottom first
};

struct Platform {
  std::string os = "linux";
  std::string architecture;  // OCI's name for the host's: "amd64", "arm64", ...
  std::string variant;       // "" = any ("v8" on arm64 is matched by "")
  static Platform host();
};

// What the staged upload is: an OCI layout (oci-layout + index.json), a docker-save archive
// (manifest.json), or anything else (taken as a root-filesystem tree/tarball by the caller).
enum class Format { kOciLayout, kDockerSave, kRootfs };
Format sniff(const std::filesystem::path& dir);

// Bounds on what resolve() reads (a manifest, index or config larger than this is refused
// before it is read; docker-save's manifest.json likewise).
inline constexpr uint64_t kMaxJsonBlobBytes = 4 << 20;
inline constexpr int kMaxIndexDepth = 4;    // index -> index -> ... -> manifest
inline constexpr int kMaxJsonNesting = 32;  // arrays/objects within one JSON document
inline constexpr size_t kMaxLayers = 256;   // layers in one manifest

// Reads index.json / manifest.json, chooses the platform's manifest (an index of indexes
// followed, bounded by kMaxIndexDepth; a digest seen twice on the way is refused), reads and
// verifies (sha256, size) the manifest and config blobs it names from dir/blobs/sha256/<hex>
// (docker-save: the paths manifest.json names), checks every layer blob's size and existence
// (their sha256 is checked by apply_layer as it reads them, so each is read once), parses the
// config and checks that it has one diff_id per layer. Errors are kInvalidArgument with the
// file and the reason ("index.json: manifests[0].digest: not a sha256 digest").
Result<Resolved> resolve(const std::filesystem::path& dir, const Platform& want);

// Parses an image config blob's text: the "config" object (absent = empty) and rootfs.diff_ids.
struct ParsedConfig {
  ImageConfig config;
  std::vector<std::string> diff_ids;
  std::string os, architecture;
};
Result<ParsedConfig> parse_config_blob(std::string_view text);

// Whether `s` is "sha256:" followed by 64 lowercase hex digits.
bool valid_sha256_digest(std::string_view s);

}  // namespace space::image

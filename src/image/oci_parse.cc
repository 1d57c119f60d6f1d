// Parsers of an image's index, manifest and docker-save manifest.json (see oci_parse.h). All
// input is untrusted: exceptions are off in the JSON parser, nesting is bounded before parsing,
// and every field's type is checked before it is read.
#include "image/oci_parse.h"

#include "common/json_nesting.h"
#include "image/layer.h"

namespace space::image::detail {

using nlohmann::json;

namespace {

Result<std::string> string_of(const json& j, const char* key, const std::string& what,
                              bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return fail(Code::kInvalidArgument, what + "." + key + ": missing");
    return std::string();
  }
  if (!it->is_string()) return fail(Code::kInvalidArgument, what + "." + key + ": not a string");
  return it->get<std::string>();
}

bool platform_matches(const Platform& have, const Platform& want) {
  return have.os == want.os && have.architecture == want.architecture &&
         (want.variant.empty() || have.variant.empty() || have.variant == want.variant);
}

}  // namespace

bool is_index_type(std::string_view t) { return t == kOciIndex || t == kDockerList; }
bool is_manifest_type(std::string_view t) { return t == kOciManifest || t == kDockerManifest; }
bool is_config_type(std::string_view t) { return t == kOciConfig || t == kDockerConfig; }

Result<json> parse_json(std::string_view text) {
  if (text.size() > kMaxJsonBlobBytes)
    return fail(Code::kInvalidArgument,
                "larger than " + std::to_string(kMaxJsonBlobBytes) + " bytes");
  if (!json_nesting_within(text, kMaxJsonNesting))
    return fail(Code::kInvalidArgument, "JSON nested too deep");
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(Code::kInvalidArgument, "not valid JSON");
  return j;
}

Result<Descriptor> parse_descriptor(const json& j, const std::string& what) {
  if (!j.is_object()) return fail(Code::kInvalidArgument, what + ": not an object");
  Descriptor d;
  d.media_type = TRY(string_of(j, "mediaType", what, true));
  d.digest = TRY(string_of(j, "digest", what, true));
  if (!valid_sha256_digest(d.digest))
    return fail(Code::kInvalidArgument, what + ".digest: not a sha256 digest (sha256:<64 hex>)");
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_integer() ||
      (!size->is_number_unsigned() && size->get<int64_t>() < 0))
    return fail(Code::kInvalidArgument, what + ".size: missing or not a size");
  d.size = size->get<uint64_t>();
  auto p = j.find("platform");
  if (p != j.end() && !p->is_null()) {
    if (!p->is_object()) return fail(Code::kInvalidArgument, what + ".platform: not an object");
    d.has_platform = true;
    d.platform.os = TRY(string_of(*p, "os", what + ".platform", true));
    d.platform.architecture = TRY(string_of(*p, "architecture", what + ".platform", true));
    d.platform.variant = TRY(string_of(*p, "variant", what + ".platform", false));
  }
  return d;
}

Result<Descriptor> choose_manifest(std::string_view index_text, const Platform& want) {
  json j = TRY(parse_json(index_text));
  if (!j.is_object()) return fail(Code::kInvalidArgument, "not a JSON object");
  std::string media_type = TRY(string_of(j, "mediaType", "index", false));
  if (!media_type.empty() && !is_index_type(media_type))
    return fail(Code::kInvalidArgument,
                "mediaType: \"" + media_type.substr(0, 128) + "\" is not an image index");
  auto ms = j.find("manifests");
  if (ms == j.end() || !ms->is_array())
    return fail(Code::kInvalidArgument, "manifests: missing or not an array");
  if (ms->size() > 4096) return fail(Code::kInvalidArgument, "manifests: more than 4096 entries");
  std::vector<Descriptor> unplatformed;
  std::string other_type;  // the first media type passed over, for the error
  std::vector<std::string> platforms_seen;
  for (size_t i = 0; i < ms->size(); ++i) {
    Descriptor d = TRY(parse_descriptor((*ms)[i], "manifests[" + std::to_string(i) + "]"));
    if (!is_index_type(d.media_type) && !is_manifest_type(d.media_type)) {
      if (other_type.empty()) other_type = d.media_type.substr(0, 128);
      continue;
    }
    if (!d.has_platform) {
      // The same image under two tags (skopeo's oci:dir:tag1 and :tag2) is one image.
      bool seen = false;
      for (const auto& u : unplatformed) seen = seen || u.digest == d.digest;
      if (!seen) unplatformed.push_back(std::move(d));
      continue;
    }
    if (platform_matches(d.platform, want)) return d;
    if (platforms_seen.size() < 8)
      platforms_seen.push_back(d.platform.os + "/" + d.platform.architecture +
                               (d.platform.variant.empty() ? "" : "/" + d.platform.variant));
  }
  if (unplatformed.size() == 1) return unplatformed.front();
  if (unplatformed.size() > 1)
    return fail(Code::kInvalidArgument,
                "manifests: " + std::to_string(unplatformed.size()) +
                    " images without a platform; an import takes one image per archive");
  std::string want_name = want.os + "/" + want.architecture;
  if (!platforms_seen.empty()) {
    std::string list;
    for (const auto& p : platforms_seen) list += (list.empty() ? "" : ", ") + p;
    return fail(Code::kInvalidArgument, "manifests: no image for this host's platform " +
                                            want_name + " (has " + list + ")");
  }
  if (!other_type.empty())
    return fail(Code::kInvalidArgument, "manifests: unknown media type \"" + other_type + "\"");
  return fail(Code::kInvalidArgument, "manifests: empty");
}

Result<ManifestDoc> parse_manifest(std::string_view text, std::string_view media_type) {
  json j = TRY(parse_json(text));
  if (!j.is_object()) return fail(Code::kInvalidArgument, "not a JSON object");
  auto sv = j.find("schemaVersion");
  if (sv == j.end() || !sv->is_number_integer() || sv->get<int64_t>() != 2)
    return fail(Code::kInvalidArgument, "schemaVersion: not 2");
  std::string own = TRY(string_of(j, "mediaType", "manifest", false));
  if (!own.empty() && own != media_type)
    return fail(Code::kInvalidArgument, "mediaType: \"" + own.substr(0, 128) +
                                            "\" is not what its descriptor says (\"" +
                                            std::string(media_type) + "\")");
  auto cfg = j.find("config");
  if (cfg == j.end()) return fail(Code::kInvalidArgument, "config: missing");
  ManifestDoc doc;
  doc.config = TRY(parse_descriptor(*cfg, "config"));
  if (!is_config_type(doc.config.media_type))
    return fail(Code::kInvalidArgument, "config.mediaType: unknown media type \"" +
                                            doc.config.media_type.substr(0, 128) + "\"");
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array())
    return fail(Code::kInvalidArgument, "layers: missing or not an array");
  if (layers->size() > kMaxLayers)
    return fail(Code::kInvalidArgument,
                "layers: more than " + std::to_string(kMaxLayers) + " layers");
  for (size_t i = 0; i < layers->size(); ++i) {
    std::string what = "layers[" + std::to_string(i) + "]";
    Descriptor d = TRY(parse_descriptor((*layers)[i], what));
    if (d.media_type.empty() || !known_layer_media_type(d.media_type))
      return fail(Code::kInvalidArgument,
                  what + ".mediaType: unknown media type \"" + d.media_type.substr(0, 128) + "\"");
    doc.layers.push_back(std::move(d));
  }
  return doc;
}

Result<DockerSaveDoc> parse_docker_manifest(std::string_view text) {
  json j = TRY(parse_json(text));
  if (!j.is_array()) return fail(Code::kInvalidArgument, "not a JSON array");
  if (j.empty()) return fail(Code::kInvalidArgument, "names no image");
  if (j.size() > 1)
    return fail(Code::kInvalidArgument, "names " + std::to_string(j.size()) +
                                            " images; an import takes one image per archive");
  const json& m = j[0];
  if (!m.is_object()) return fail(Code::kInvalidArgument, "[0]: not an object");
  DockerSaveDoc doc;
  std::string config = TRY(string_of(m, "Config", "[0]", true));
  auto c = clean_relative_path(config);
  if (!c) return fail(std::move(c.error()).wrap("[0].Config"));
  doc.config = std::move(*c);
  auto layers = m.find("Layers");
  if (layers == m.end() || !layers->is_array())
    return fail(Code::kInvalidArgument, "[0].Layers: missing or not an array");
  if (layers->size() > kMaxLayers)
    return fail(Code::kInvalidArgument,
                "[0].Layers: more than " + std::to_string(kMaxLayers) + " layers");
  for (size_t i = 0; i < layers->size(); ++i) {
    std::string what = "[0].Layers[" + std::to_string(i) + "]";
    if (!(*layers)[i].is_string()) return fail(Code::kInvalidArgument, what + ": not a string");
    auto p = clean_relative_path((*layers)[i].get<std::string>());
    if (!p) return fail(std::move(p.error()).wrap(what));
    doc.layers.push_back(std::move(*p));
  }
  return doc;
}

Result<std::string> clean_relative_path(std::string_view p) {
  if (p.size() > 4096) return fail(Code::kInvalidArgument, "path longer than 4096 bytes");
  if (p.find('\0') != std::string_view::npos)
    return fail(Code::kInvalidArgument, "path holds a NUL byte");
  if (p.starts_with("/")) return fail(Code::kInvalidArgument, "absolute path");
  std::string out;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view part = p.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return fail(Code::kInvalidArgument, "path with a \"..\" component");
    if (!out.empty()) out += '/';
    out += part;
  }
  if (out.empty()) return fail(Code::kInvalidArgument, "empty path");
  return out;
}

}  // namespace space::image::detail

// resolve(), sniff() and the image config: OCI layouts and docker-save directories built here
// blob by blob, the host platform's manifest chosen, and each malformed or hostile layout
// refused with the file and the reason.
#include "image/oci.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../temp_dir.h"
#include "common/fd.h"
#include "image/layer.h"
#include "image/oci_parse.h"
#include "image/sha256.h"
#include "image_fixtures.h"

namespace space::image {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::Layout;
using test::make_tar;

Platform host_platform() { return Platform::host(); }

std::string message_of(const Result<Resolved>& r) { return r ? "" : r.error().message(); }

class OciTest : public ::testing::Test {
 protected:
  fs::path dir() const { return tmp_.path() / "layout"; }
  // A one-layer image whose config sets every field SPACE honours.
  json simple_image(Layout& l) {
    std::string tar = make_tar({{.name = "hello", .data = "world"}});
    json layer = l.blob(tar, test::kTar);
    json cfg = {{"Env", {"PATH=/usr/bin", "LANG=C.UTF-8"}},
                {"WorkingDir", "/work"},
                {"User", "1000:1000"},
                {"Entrypoint", {"/bin/sh", "-c"}},
                {"Cmd", {"echo hi"}},
                {"Labels", {{"org.example.team", "agents"}}}};
    json config = l.config({sha256_digest(tar)}, cfg, host_platform().architecture);
    return l.manifest(config, {layer});
  }
  test_support::TempDir tmp_{"space-image-oci"};
};

TEST_F(OciTest, ResolvesASingleManifestLayout) {
  Layout l(dir());
  json m = simple_image(l);
  l.index({m});
  EXPECT_EQ(sniff(dir()), Format::kOciLayout);
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  EXPECT_EQ(r->format, "oci");
  EXPECT_EQ(r->manifest_digest, m["digest"]);
  ASSERT_EQ(r->layers.size(), 1u);
  EXPECT_TRUE(valid_sha256_digest(r->layers[0].diff_id));
  EXPECT_EQ(r->layers[0].media_type, test::kTar);
  EXPECT_EQ(r->layers[0].path, dir() / "blobs/sha256" / test::hex_of(r->layers[0].digest));
  const ImageConfig& c = r->config;
  EXPECT_EQ(c.env, (std::vector<std::string>{"PATH=/usr/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(c.working_dir, "/work");
  EXPECT_EQ(c.user, "1000:1000");
  EXPECT_EQ(c.entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c.cmd, (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c.labels.at("org.example.team"), "agents");
}

TEST_F(OciTest, ChoosesTheHostsManifestFromAMultiPlatformIndex) {
  Layout l(dir());
  std::string other_tar = make_tar({{.name = "other", .data = "x"}});
  json other = l.manifest(l.config({sha256_digest(other_tar)}), {l.blob(other_tar, test::kTar)});
  json mine = simple_image(l);
  std::string other_arch = host_platform().architecture == "arm64" ? "amd64" : "arm64";
  // An attestation-like entry of another media type is passed over.
  json att = l.blob("{}", "application/vnd.in-toto+json");
  l.index({test::with_platform(other, other_arch, "v8"), att,
           test::with_platform(mine, host_platform().architecture)});
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  EXPECT_EQ(r->manifest_digest, mine["digest"]);
  // No image for this platform: the error lists what there is.
  Platform s390{"linux", "s390x", ""};
  r = resolve(dir(), s390);
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("no image for this host's platform linux/s390x"), std::string::npos)
      << message_of(r);
  EXPECT_NE(message_of(r).find(other_arch + "/v8"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, OneImageUnderTwoTagsIsOneImage) {
  Layout l(dir());
  json m = simple_image(l);
  json a = m, b = m;
  a["annotations"] = {{"org.opencontainers.image.ref.name", "v1"}};
  b["annotations"] = {{"org.opencontainers.image.ref.name", "latest"}};
  l.index({a, b});
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  std::string tar = make_tar({{.name = "other"}});
  json other = l.manifest(l.config({sha256_digest(tar)}), {l.blob(tar, test::kTar)});
  l.index({a, other});
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("2 images without a platform"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, FollowsAnIndexOfIndexesButNotTooDeep) {
  Layout l(dir());
  json d = simple_image(l);
  for (int i = 0; i < kMaxIndexDepth - 1; ++i) {
    json idx = {{"schemaVersion", 2}, {"manifests", {d}}};
    d = l.blob(idx.dump(), "application/vnd.oci.image.index.v1+json");
  }
  l.index({d});
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  json idx = {{"schemaVersion", 2}, {"manifests", {d}}};
  l.index({l.blob(idx.dump(), "application/vnd.oci.image.index.v1+json")});
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("indexes nested more than"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, AnIndexReferringToItselfIsRefused) {
  Layout l(dir());
  // A blob cannot hold its own digest, so a loop needs a blob whose content is not what its
  // name says: that is refused as a digest mismatch before the walk could go round.
  std::string fake = std::string(64, 'a');
  json self = {{"mediaType", "application/vnd.oci.image.index.v1+json"},
               {"digest", "sha256:" + fake},
               {"size", 0}};
  json idx = {{"schemaVersion", 2}, {"manifests", {self}}};
  std::string text = idx.dump();
  for (int i = 0; i < 4; ++i) {  // the size it states is its own
    idx["manifests"][0]["size"] = text.size();
    text = idx.dump();
  }
  ASSERT_EQ(idx["manifests"][0]["size"], text.size());
  test::write_file(dir() / "blobs/sha256" / fake, text);
  test::write_file(dir() / "index.json", text);
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("its content hashes to"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, BlobMismatchesAreRefused) {
  Layout l(dir());
  json m = simple_image(l);
  l.index({m});
  fs::path mp = dir() / "blobs/sha256" / test::hex_of(m["digest"]);
  std::string good = test::read_file(mp);
  // Same size, other content.
  std::string bad = good;
  bad[bad.size() - 2] = bad[bad.size() - 2] == ' ' ? '\t' : ' ';
  test::write_file(mp, bad);
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("its content hashes to"), std::string::npos) << message_of(r);
  // Other size.
  test::write_file(mp, good + " ");
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("its descriptor says"), std::string::npos) << message_of(r);
  // Missing; a symlink (to the good content even); a directory.
  fs::remove(mp);
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("missing"), std::string::npos) << message_of(r);
  test::write_file(tmp_.path() / "elsewhere", good);
  fs::create_symlink(tmp_.path() / "elsewhere", mp);
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("a symlink"), std::string::npos) << message_of(r);
  fs::remove(mp);
  fs::create_directory(mp);
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
}

TEST_F(OciTest, ALayerBlobOfTheWrongSizeOrMissingIsRefused) {
  Layout l(dir());
  json m = simple_image(l);
  l.index({m});
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  fs::path blob = r->layers[0].path;
  std::string bytes = test::read_file(blob);
  test::write_file(blob, bytes + "x");
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("the manifest says"), std::string::npos) << message_of(r);
  fs::remove(blob);
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("layer 0"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, UnknownMediaTypesAreRefused) {
  {
    Layout l(dir());
    std::string tar = make_tar({{.name = "f"}});
    json layer = l.blob(tar, "application/vnd.example.weird.layer");
    l.index({l.manifest(l.config({sha256_digest(tar)}), {layer})});
    auto r = resolve(dir(), host_platform());
    ASSERT_FALSE(r);
    EXPECT_NE(message_of(r).find("layers[0].mediaType: unknown media type"), std::string::npos)
        << message_of(r);
  }
  fs::remove_all(dir());
  {
    Layout l(dir());
    json cfg = l.blob(R"({"rootfs":{"type":"layers","diff_ids":[]}})", "application/x-other");
    l.index({l.manifest(cfg, {})});
    auto r = resolve(dir(), host_platform());
    ASSERT_FALSE(r);
    EXPECT_NE(message_of(r).find("config.mediaType: unknown media type"), std::string::npos)
        << message_of(r);
  }
  fs::remove_all(dir());
  {
    Layout l(dir());
    l.index({l.blob("{}", "application/vnd.example.thing")});
    auto r = resolve(dir(), host_platform());
    ASSERT_FALSE(r);
    EXPECT_NE(message_of(r).find("unknown media type \"application/vnd.example.thing\""),
              std::string::npos)
        << message_of(r);
  }
}

TEST_F(OciTest, MalformedJsonIsRefusedWithTheFile) {
  Layout l(dir());
  json m = simple_image(l);
  struct Case {
    std::string index;
    std::string reason;
  } cases[] = {
      {"{not json", "index.json: not valid JSON"},
      {"[]", "index.json: not a JSON object"},
      {std::string(100, '[') + std::string(100, ']'), "index.json: JSON nested too deep"},
      {R"({"manifests":{}})", "manifests: missing or not an array"},
      {R"({"manifests":[{"mediaType":1}]})", "manifests[0].mediaType: not a string"},
      {R"({"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
       R"("digest":"sha256:abc","size":1}]})",
       "manifests[0].digest: not a sha256 digest"},
      {R"({"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
           m["digest"].get<std::string>() + R"(","size":"12"}]})",
       "manifests[0].size: missing or not a size"},
      {R"({"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
           m["digest"].get<std::string>() + R"(","size":-5}]})",
       "manifests[0].size: missing or not a size"},
      {R"({"manifests":[]})", "manifests: empty"},
      {R"({"mediaType":"text/plain","manifests":[]})", "is not an image index"},
  };
  for (const auto& c : cases) {
    test::write_file(dir() / "index.json", c.index);
    auto r = resolve(dir(), host_platform());
    ASSERT_FALSE(r) << c.index;
    EXPECT_NE(message_of(r).find(c.reason), std::string::npos) << c.index << ": " << message_of(r);
  }
  test::write_file(dir() / "oci-layout", R"({"imageLayoutVersion":"2.0.0"})");
  l.index({m});
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("imageLayoutVersion"), std::string::npos) << message_of(r);
}

TEST_F(OciTest, AMalformedManifestOrConfigIsRefused) {
  Layout l(dir());
  std::string tar = make_tar({{.name = "f"}});
  json layer = l.blob(tar, test::kTar);
  // Two layers, one diff_id.
  l.index({l.manifest(l.config({sha256_digest(tar)}), {layer, layer})});
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("lists 1 diff_ids for 2 layers"), std::string::npos)
      << message_of(r);
  // A config of the wrong types.
  json bad_cfg = l.config({sha256_digest(tar)}, {{"Env", "PATH=/bin"}});
  l.index({l.manifest(bad_cfg, {layer})});
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("Env: not an array of strings"), std::string::npos) << message_of(r);
  // Another architecture in the config of a single-manifest image.
  std::string other = host_platform().architecture == "arm64" ? "amd64" : "arm64";
  l.index({l.manifest(l.config({sha256_digest(tar)}, nullptr, other), {layer})});
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("the image is for linux/" + other), std::string::npos)
      << message_of(r);
  // A manifest whose schemaVersion is wrong.
  json m = l.blob(R"({"schemaVersion":1})", "application/vnd.oci.image.manifest.v1+json");
  l.index({m});
  r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("schemaVersion: not 2"), std::string::npos) << message_of(r);
}

// docker save: manifest.json, a config file and layer.tar files named by path.
class DockerSaveTest : public OciTest {
 protected:
  void write_image(const json& manifest) {
    test::write_file(dir() / "manifest.json", manifest.dump());
  }
  std::string tar_ = make_tar({{.name = "etc/motd", .data = "hi"}});
  std::string config_ = json{{"architecture", Platform::host().architecture},
                             {"os", "linux"},
                             {"config", {{"Env", {"A=1"}}, {"Cmd", {"sh"}}}},
                             {"rootfs", {{"type", "layers"}, {"diff_ids", {sha256_digest(tar_)}}}}}
                            .dump();
};

TEST_F(DockerSaveTest, ResolvesTheLegacyLayout) {
  std::string cfg_name = test::hex_of(sha256_digest(config_)) + ".json";
  test::write_file(dir() / cfg_name, config_);
  test::write_file(dir() / "abc123/layer.tar", tar_);
  write_image(json::array(
      {{{"Config", cfg_name}, {"RepoTags", {"agent:latest"}}, {"Layers", {"abc123/layer.tar"}}}}));
  EXPECT_EQ(sniff(dir()), Format::kDockerSave);
  auto r = resolve(dir(), host_platform());
  ASSERT_TRUE(r) << message_of(r);
  EXPECT_EQ(r->format, "docker");
  EXPECT_EQ(r->manifest_digest, "");
  EXPECT_EQ(r->config_digest, sha256_digest(config_));
  ASSERT_EQ(r->layers.size(), 1u);
  EXPECT_EQ(r->layers[0].digest, "");
  EXPECT_EQ(r->layers[0].media_type, "");
  EXPECT_EQ(r->layers[0].diff_id, sha256_digest(tar_));
  EXPECT_EQ(r->config.env, std::vector<std::string>{"A=1"});
  // Applying it: the layer's diff_id is checked.
  fs::create_directories(tmp_.path() / "root");
  UniqueFd root(::open((tmp_.path() / "root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  Totals t;
  auto a = apply_layer(r->layers[0].path, r->layers[0], root.get(), kDefaultLimits, t);
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(test::read_file(tmp_.path() / "root/etc/motd"), "hi");
}

TEST_F(DockerSaveTest, AConfigWhoseNameIsNotItsDigestIsRefused) {
  std::string cfg_name = std::string(64, 'b') + ".json";
  test::write_file(dir() / cfg_name, config_);
  test::write_file(dir() / "l/layer.tar", tar_);
  write_image(json::array({{{"Config", cfg_name}, {"Layers", {"l/layer.tar"}}}}));
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("its content hashes to"), std::string::npos) << message_of(r);
}

TEST_F(DockerSaveTest, PathsLeavingTheArchiveAreRefused) {
  test::write_file(dir() / "c.json", config_);
  test::write_file(tmp_.path() / "secret.tar", tar_);
  for (const char* layer : {"../secret.tar", "/etc/passwd", "a/../../secret.tar", ""}) {
    write_image(json::array({{{"Config", "c.json"}, {"Layers", {layer}}}}));
    auto r = resolve(dir(), host_platform());
    ASSERT_FALSE(r) << layer;
    EXPECT_NE(message_of(r).find("[0].Layers[0]"), std::string::npos) << message_of(r);
  }
  // A symlink inside the archive pointing out of it.
  fs::create_symlink(tmp_.path() / "secret.tar", dir() / "link.tar");
  write_image(json::array({{{"Config", "c.json"}, {"Layers", {"link.tar"}}}}));
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("a symlink"), std::string::npos) << message_of(r);
}

TEST_F(DockerSaveTest, MoreThanOneImageOrNoneIsRefused) {
  test::write_file(dir() / "c.json", config_);
  test::write_file(dir() / "l.tar", tar_);
  json one = {{"Config", "c.json"}, {"Layers", {"l.tar"}}};
  write_image(json::array({one, one}));
  auto r = resolve(dir(), host_platform());
  ASSERT_FALSE(r);
  EXPECT_NE(message_of(r).find("names 2 images"), std::string::npos) << message_of(r);
  write_image(json::array());
  EXPECT_FALSE(resolve(dir(), host_platform()));
  write_image(json::object());
  EXPECT_FALSE(resolve(dir(), host_platform()));
}

TEST(Sniff, TellsTheFormatsApart) {
  test_support::TempDir d("space-image-sniff");
  EXPECT_EQ(sniff(d.path()), Format::kRootfs);
  test::write_file(d.path() / "manifest.json", "[]");
  EXPECT_EQ(sniff(d.path()), Format::kDockerSave);
  test::write_file(d.path() / "oci-layout", "{}");
  EXPECT_EQ(sniff(d.path()), Format::kDockerSave);  // no index.json yet
  test::write_file(d.path() / "index.json", "{}");
  EXPECT_EQ(sniff(d.path()), Format::kOciLayout);  // Docker 25+ writes both: OCI wins
  auto r = resolve(d.path() / "nowhere", Platform::host());
  EXPECT_FALSE(r);
}

TEST(ImageConfigJson, RoundTripsAndReadsTheOciSpelling) {
  ImageConfig c;
  c.env = {"A=1", "B="};
  c.working_dir = "/srv";
  c.user = "app";
  c.entrypoint = {"/entry"};
  c.cmd = {"--flag", "x y"};
  c.labels = {{"k", "v"}};
  auto back = ImageConfig::from_json(c.to_json());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->env, c.env);
  EXPECT_EQ(back->working_dir, c.working_dir);
  EXPECT_EQ(back->user, c.user);
  EXPECT_EQ(back->entrypoint, c.entrypoint);
  EXPECT_EQ(back->cmd, c.cmd);
  EXPECT_EQ(back->labels, c.labels);
  EXPECT_EQ(ImageConfig{}.to_json(), json::object());
  auto oci = ImageConfig::from_json(
      json{{"Env", {"X=y"}}, {"Cmd", nullptr}, {"Entrypoint", nullptr}, {"Labels", nullptr}});
  ASSERT_TRUE(oci);
  EXPECT_EQ(oci->env, std::vector<std::string>{"X=y"});
  EXPECT_TRUE(oci->cmd.empty());
  EXPECT_TRUE(ImageConfig::from_json(nullptr));
}

TEST(ImageConfigJson, RefusesWrongTypesAndValues) {
  struct Case {
    json j;
    std::string reason;
  } cases[] = {
      {json::array(), "not an object"},
      {{{"Env", {1}}}, "Env[0]: not a string"},
      {{{"Env", {"NOEQUALS"}}}, "Env[0]: not NAME=VALUE"},
      {{{"Env", {"=v"}}}, "Env[0]: not NAME=VALUE"},
      {{{"Env", {std::string("A=b\0c", 5)}}}, "Env[0]: holds a NUL byte"},
      {{{"Cmd", "sh"}}, "Cmd: not an array of strings"},
      {{{"Entrypoint", {{"nested"}}}}, "Entrypoint[0]: not a string"},
      {{{"WorkingDir", 7}}, "WorkingDir: not a string"},
      {{{"WorkingDir", "relative"}}, "WorkingDir: not an absolute path"},
      {{{"User", json::object()}}, "User: not a string"},
      {{{"Labels", {{"a", 1}}}}, "Labels[\"a\"]: not a string"},
      {{{"Labels", json::array()}}, "Labels: not an object"},
  };
  for (const auto& c : cases) {
    auto r = ImageConfig::from_json(c.j);
    ASSERT_FALSE(r) << c.j.dump();
    EXPECT_NE(r.error().message().find(c.reason), std::string::npos)
        << c.j.dump() << ": " << r.error().message();
  }
}

TEST(ConfigBlob, NeedsRootfsLayers) {
  EXPECT_FALSE(parse_config_blob("{}"));
  EXPECT_FALSE(parse_config_blob(R"({"rootfs":{"type":"other","diff_ids":[]}})"));
  EXPECT_FALSE(parse_config_blob(R"({"rootfs":{"type":"layers","diff_ids":["md5:x"]}})"));
  auto r = parse_config_blob(R"({"rootfs":{"type":"layers","diff_ids":[]},"config":null})");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->diff_ids.empty());
  EXPECT_FALSE(parse_config_blob(std::string(kMaxJsonBlobBytes + 1, ' ')));
}

TEST(CleanRelativePath, NormalizesOrRefuses) {
  EXPECT_EQ(detail::clean_relative_path("a/./b//c").value(), "a/b/c");
  EXPECT_FALSE(detail::clean_relative_path("../a"));
  EXPECT_FALSE(detail::clean_relative_path("/a"));
  EXPECT_FALSE(detail::clean_relative_path("./"));
  EXPECT_FALSE(detail::clean_relative_path(std::string("a\0b", 3)));
}

TEST(Digests, Sha256Form) {
  EXPECT_TRUE(valid_sha256_digest("sha256:" + std::string(64, 'f')));
  EXPECT_FALSE(valid_sha256_digest("sha256:" + std::string(64, 'F')));
  EXPECT_FALSE(valid_sha256_digest("sha256:" + std::string(63, 'f')));
  EXPECT_FALSE(valid_sha256_digest("sha512:" + std::string(64, 'f')));
  EXPECT_EQ(sha256_digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace space::image

// The OpenAPI file and the server's route table must list exactly the same (method, path)
// pairs, so neither can drift from the other. The YAML is read with a tiny line scanner: keys
// at indent 2 under `paths:` are paths, keys at indent 4 naming an HTTP method are operations.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "api/router.h"

namespace space::api {
namespace {

std::filesystem::path openapi_file() {
  // tests/unit/api/openapi_test.cc -> <repo>/api/openapi.yaml
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path() /
         "api" / "openapi.yaml";
}

std::set<std::string> openapi_operations() {
  std::ifstream in(openapi_file());
  EXPECT_TRUE(in) << "cannot open " << openapi_file();
  static const std::regex kPath(R"(^  (/[^:\s]*):\s*$)");
  static const std::regex kMethod(R"(^    (get|put|post|delete|patch|head|options):\s*$)");
  static const std::regex kTopLevel(R"(^[A-Za-z]\S*:)");
  std::set<std::string> ops;
  std::string line, path;
  bool in_paths = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kTopLevel)) {
      in_paths = line.rfind("paths:", 0) == 0;
      path.clear();
      continue;
    }
    if (!in_paths) continue;
    if (std::regex_match(line, m, kPath)) {
      path = m[1];
    } else if (std::regex_match(line, m, kMethod) && !path.empty()) {
      std::string method = m[1];
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      ops.insert(method + " " + path);
    }
  }
  return ops;
}

TEST(OpenApi, MatchesRouteTable) {
  std::set<std::string> from_yaml = openapi_operations();
  std::set<std::string> from_router;
  for (const Route& r : routes()) {
    std::string name = std::string(http::to_string(r.method)) + " " + std::string(r.pattern);
    EXPECT_TRUE(from_router.insert(name).second) << "duplicate route " << name;
  }
  ASSERT_GE(from_yaml.size(), 10u) << "the YAML scanner found almost nothing";
  for (const auto& op : from_yaml) {
    EXPECT_TRUE(from_router.contains(op)) << op << " is in api/openapi.yaml but not routed";
  }
  for (const auto& op : from_router) {
    EXPECT_TRUE(from_yaml.contains(op)) << op << " is routed but missing from api/openapi.yaml";
  }
}

// Each operation's x-space-op in the YAML: "METHOD /path" -> "read", ...
std::map<std::string, std::string> openapi_required_ops() {
  std::ifstream in(openapi_file());
  static const std::regex kPath(R"(^  (/[^:\s]*):\s*$)");
  static const std::regex kMethod(R"(^    (get|put|post|delete|patch|head|options):\s*$)");
  static const std::regex kOp(R"(^      x-space-op:\s*([a-z]+)\s*$)");
  static const std::regex kTopLevel(R"(^[A-Za-z]\S*:)");
  std::map<std::string, std::string> out;
  std::string line, path, op;
  bool in_paths = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kTopLevel)) {
      in_paths = line.rfind("paths:", 0) == 0;
      path.clear();
      op.clear();
    } else if (!in_paths) {
      continue;
    } else if (std::regex_match(line, m, kPath)) {
      path = m[1];
      op.clear();
    } else if (std::regex_match(line, m, kMethod) && !path.empty()) {
      op = m[1];
      for (char& c : op) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      op += " " + path;
    } else if (std::regex_match(line, m, kOp) && !op.empty()) {
      out[op] = m[1];
    }
  }
  return out;
}

// The operation a token needs for each route (docs/api-auth.md) is documented as x-space-op.
TEST(OpenApi, DocumentsEachRoutesOperation) {
  std::map<std::string, std::string> from_yaml = openapi_required_ops();
  for (const Route& r : routes()) {
    std::string name = std::string(http::to_string(r.method)) + " " + std::string(r.pattern);
    auto it = from_yaml.find(name);
    ASSERT_NE(it, from_yaml.end()) << name << " has no x-space-op in api/openapi.yaml";
    EXPECT_EQ(it->second, op_name(r.op)) << name;
  }
}

TEST(Router, MatchesPlaceholdersBySegment) {
  auto m = match_route(http::verb::delete_, {"v1", "sandboxes", "sb_1", "processes", "42"});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->route->pattern, "/v1/sandboxes/{id}/processes/{pid}");
  EXPECT_EQ(m->params,
            (std::vector<std::pair<std::string, std::string>>{{"id", "sb_1"}, {"pid", "42"}}));
  EXPECT_FALSE(match_route(http::verb::patch, {"v1", "sandboxes"}));
  auto snap = match_route(http::verb::post, {"v1", "snapshots", "snap_1", "restore"});
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->route->pattern, "/v1/snapshots/{snap}/restore");
  EXPECT_EQ(snap->params, (std::vector<std::pair<std::string, std::string>>{{"snap", "snap_1"}}));
  EXPECT_FALSE(match_route(http::verb::put, {"v1", "sandboxes", "sb_1", "snapshots"}));
  EXPECT_FALSE(match_route(http::verb::get, {"v1", "snapshots", "snap_1", "restore"}));
  EXPECT_FALSE(match_route(http::verb::get, {"v1"}));
}

}  // namespace
}  // namespace space::api

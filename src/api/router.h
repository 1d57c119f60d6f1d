// The REST API's route table and dispatcher. routes() is the single list of every (method,
// path) the server answers; api/openapi.yaml documents exactly the same set, and a unit test
// (tests/unit/api/openapi_test.cc) fails if the two drift. dispatch() matches a request, runs
// its handler, and turns every failure into a JSON error; it never throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/exchange.h"
#include "api/metrics.h"
#include "daemon/service.h"

namespace space::api {

struct ApiContext {
  daemon::SandboxService& service;
  ApiMetrics& metrics;
};

using Handler = Result<void> (*)(Exchange&, ApiContext&);

struct Route {
  http::verb method;
  std::string_view pattern;  // "/v1/sandboxes/{id}/files"; {name} matches one path segment
  Handler handler;
};

const std::vector<Route>& routes();

struct RouteMatch {
  const Route* route = nullptr;
  std::vector<std::pair<std::string, std::string>> params;
};
// nullopt if no route has this method and path.
std::optional<RouteMatch> match_route(http::verb method, const std::vector<std::string>& segments);

void dispatch(Exchange& ex, ApiContext& ctx);

}  // namespace space::api

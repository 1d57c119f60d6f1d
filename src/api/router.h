// The REST API's route table and dispatcher. routes() is the single list of every (method,
// path) the server answers; api/openapi.yaml documents exactly the same set, and a unit test
// (tests/unit/api/openapi_test.cc) fails if the two drift. Each route names the operation a
// token needs for it (docs/api-auth.md). dispatch() authenticates the caller, matches the
// request, authorizes it, runs its handler, and turns every failure into a JSON error; it
// never throws.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/auth.h"
#include "api/exchange.h"
#include "api/metrics.h"
#include "api/token_load.h"
#include "daemon/service.h"

namespace space::api {

struct ApiContext {
  daemon::SandboxService& service;  // for a token limited to some profiles: a ScopedService
  ApiMetrics& metrics;
  Transport transport = Transport::kUnix;
  daemon::TokenStore* tokens = nullptr;             // null: no tokens, only the root operator
  const std::set<std::string>* profiles = nullptr;  // the configured profiles
  const Principal* principal = nullptr;             // who is calling; set by dispatch()
  TokenLoad* token_load = nullptr;                  // null: requests per token not bounded
};

using Handler = Result<void> (*)(Exchange&, ApiContext&);

struct Route {
  http::verb method;
  std::string_view pattern;  // "/v1/sandboxes/{id}/files"; {name} matches one path segment
  Handler handler;
  Op op;  // what a token needs to be granted to use this route
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

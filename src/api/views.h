// The JSON of the service's results: one to_json per struct of daemon/service_types.h, writing the
// shapes of api/openapi.yaml (schemas Sandbox, Snapshot, Process, Diff, Image, AuditEvent,
// AuditVerification, Node, DrainReport and the health answer). The handlers render every
// result through these, so the wire shape is decided here and nowhere else.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/service_types.h"

namespace space::api {

nlohmann::json to_json(const daemon::SandboxInfo& s);
nlohmann::json to_json(const daemon::SnapshotInfo& s);
nlohmann::json to_json(const daemon::ProcessInfo& p);
nlohmann::json to_json(const daemon::Diff& d);
nlohmann::json to_json(const daemon::ImageInfo& i);
nlohmann::json to_json(const daemon::VmDiskInfo& d);
nlohmann::json to_json(const daemon::AuditEvent& e);
nlohmann::json to_json(const daemon::AuditVerdict& v);
nlohmann::json to_json(const daemon::Health& h);
nlohmann::json to_json(const daemon::NodeInfo& n);
nlohmann::json to_json(const daemon::DrainResult& r);

// A JSON array of the items' to_json.
template <typename T>
nlohmann::json to_json(const std::vector<T>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const T& item : items) out.push_back(to_json(item));
  return out;
}

// The kind-specific fields of an audit event (AuditEvent::data_json) as JSON.
nlohmann::json audit_data(const daemon::AuditEvent& e);

}  // namespace space::api

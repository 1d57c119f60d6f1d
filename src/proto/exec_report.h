// The `proc_exec` frame (docs/agent-protocol.md, "Exec auditing (microVMs)"): the execs a
// microVM's agent saw in its guest (common/exec_notify.h), sent on stream 0 in batches
//   {"events":[RECORD,...],"dropped":N}
// where each RECORD is the data of a "proc.exec" audit event as the guest reads it, plus the
// `stream` of the exec it ran under, and `dropped` counts the records the agent could not keep
// since its previous frame. The agent builds the payload from records it serialized when it saw
// them; the daemon decodes it as hostile input: a payload that is not this shape is a protocol
// violation, and every record is reduced to the documented fields, each type-checked and
// bounded (a record that does not pass is left out and counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/exec_notify.h"

namespace space::proto {

// Bounds of one record, beyond kMaxExecArgs arguments of kMaxExecArgBytes each: all arguments
// together (the agent reads no more, the daemon keeps no more), cwd and path, and `resolved`.
inline constexpr size_t kMaxReportedArgvBytes = 64 * 1024;
inline constexpr size_t kMaxReportedPathBytes = kMaxExecArgBytes;
inline constexpr size_t kMaxReportedResolvedBytes = 2 * kMaxExecArgBytes;
// Records in one frame.
inline constexpr size_t kMaxReportEvents = 4096;
// What encode_exec_report adds around its records, at most (for the agent's batching).
inline constexpr size_t kExecReportOverhead = 64;

// {"events":[r,...],"dropped":N} from records the caller serialized already (JSON objects).
std::string encode_exec_report(std::span<const std::string> records, uint64_t dropped);

struct ExecReport {
  std::vector<nlohmann::json> events;  // normalized records (normalize_exec_record)
  uint64_t dropped = 0;                // records the agent says it dropped since its previous frame
  uint64_t malformed = 0;              // records that were not valid exec records: left out
};

// Decodes a `proc_exec` payload from an untrusted agent. kProtocol if the payload is not
// {"events":[...],"dropped":N} (N >= 0, at most kMaxReportEvents events, no deep nesting).
Result<ExecReport> decode_exec_report(std::string_view payload);

// One record reduced to the documented fields: syscall ("execve" or "execveat"; required),
// abi, pid, ppid, uid, cwd, path, resolved, fd, argv (strings), the flags at_empty_path,
// fileless, path_truncated, argv_truncated, argv_unreadable, caller_gone (kept when true), and
// stream (a daemon-range stream id, or null). Longer strings and argvs are cut to the bounds
// above (argv_truncated / path_truncated say so); unknown fields are dropped. nullopt if the
// record is not an object, lacks a valid syscall, or has a field of the wrong type.
std::optional<nlohmann::json> normalize_exec_record(const nlohmann::json& record);

}  // namespace space::proto

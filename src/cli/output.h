// Terminal output helpers for the CLI: aligned tables, ages ("5m"), raw writes that survive
// partial writes, and the one place errors are printed ("space: <what>; <what to do>").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::cli {

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

// Seconds since an RFC 3339 UTC timestamp ("2026-12-02T10:00:00Z", fractions allowed) or a
// number of Unix seconds, as "42s", "5m", "3h", "2d"; "-" if it cannot be read.
std::string age(const nlohmann::json& created_at, double now_unix);

// The current time as Unix seconds (for age()).
double now_unix();

// Text as is on stdout.
void print(const std::string& text);

// A JSON value as a table cell: strings bare, null as "-", others dumped.
std::string cell(const nlohmann::json& v);

// write(2) until done; false on error (e.g. EPIPE).
bool write_all(int fd, std::string_view data);

// Prints "space: <message>" on stderr and returns kExitSpaceFailed (125).
int report(const Error& e);

// One JSON document on stdout (pretty-printed), as every --json output is.
void print_json(const nlohmann::json& j);

}  // namespace space::cli

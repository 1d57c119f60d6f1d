// Terminal output helpers for the CLI: aligned tables, ages ("5m"), raw writes that survive
// partial writes, and the one place errors are printed ("space: <what>; <what to do>").
//
// Much of what the CLI prints comes from inside a sandbox: process argv, file paths, audit
// fields, error messages that quote them. None of it may act on the operator's terminal (move
// the cursor, recolour, rewrite a line, set the clipboard, reorder text with bidi controls), so
// every such string goes through escape_text() on its way out, and --json output through
// dump_json(). format_table() and report() escape by themselves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::cli {

// Untrusted text made visible and inert on a terminal, unambiguously (it decodes back to the
// same bytes, since a backslash of the text is always doubled):
//   a backslash                               -> two backslashes
//   newline, CR, tab                          -> \n, \r, \t
//   other C0 controls (ESC is \x1b), DEL      -> \xNN (the byte)
//   bytes that are not UTF-8 (stray continuation bytes, overlong forms, surrogates, a sequence
//   cut short, 0xF5..0xFF)                    -> \xNN (each byte)
//   C1 controls (U+0080..U+009F; two bytes in UTF-8, so never \xNN), bidi controls
//   (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C), line and paragraph separators
//   (U+2028, U+2029), zero-width and other invisible format characters (U+200B..U+200D,
//   U+2060..U+206F, U+FEFF, U+00AD, tags U+E0000..U+E007F, fillers) -> \u{XXXX} (code point)
// Everything else, printable ASCII and the rest of UTF-8 (CJK, emoji, accents), is unchanged.
std::string escape_text(std::string_view text);

// The columns `text` takes on a terminal: code points, East Asian wide and fullwidth ones (and
// most emoji) as two, combining marks and variation selectors as none. For text that went
// through escape_text(); a byte that is not UTF-8 counts as one.
size_t display_width(std::string_view text);

// A JSON value as text for --json output (indent < 0: one line): valid JSON whatever the
// strings hold (bytes that are not UTF-8 become U+FFFD instead of an exception), with control
// characters, DEL, C1 controls and the invisible characters escape_text() shows as \u{XXXX}
// written as \uXXXX escapes, never as raw bytes; other UTF-8 stays as is.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// Columns padded to their widest cell (display_width), two spaces apart; the last column is not
// padded. Every cell is escaped (escape_text) first: tables show daemon-relayed text.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

// Seconds since an RFC 3339 UTC timestamp ("2026-12-02T10:00:00Z", fractions allowed) or a
// number of Unix seconds, as "42s", "5m", "3h", "2d"; "-" if it cannot be read.
std::string age(const nlohmann::json& created_at, double now_unix);

// Text as is on stdout (escape what is not the CLI's own).
void print(const std::string& text);

// A JSON value as a table cell: strings bare, null as "-", others dumped.
std::string cell(const nlohmann::json& v);

// write(2) until done; false on error (e.g. EPIPE).
bool write_all(int fd, std::string_view data);

// Prints "space: <message>" on stderr, the message escaped (it may quote sandbox text), and
// returns kExitSpaceFailed (125).
int report(const Error& e);

// One JSON document on stdout (pretty-printed, dump_json), as every --json output is.
void print_json(const nlohmann::json& j);

}  // namespace space::cli

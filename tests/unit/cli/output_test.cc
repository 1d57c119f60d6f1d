// Terminal safety of what the CLI prints (output.h): escape_text() class by class, that its
// output decodes back to the input (so it is unambiguous) and never holds a byte or code point
// a terminal acts on, display widths, tables, dump_json(); and end to end, `space ps`, `diff`
// and `audit` (plain and --json) against a service whose sandbox text is hostile.
#include "cli/output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "common/utf8.h"
#include "served_cli.h"

namespace space::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `cp` as UTF-8.
std::string utf8(char32_t cp) { return encode_utf8(cp); }

// The inverse of escape_text(), for the tests: nullopt if `s` is not something escape_text()
// can have produced.
std::optional<std::string> unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    switch (s[i]) {
      case '\\':
        out += '\\';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x': {
        if (i + 2 >= s.size()) return std::nullopt;
        out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
        i += 2;
        break;
      }
      case 'u': {
        size_t close = s.find('}', i);
        if (i + 1 >= s.size() || s[i + 1] != '{' || close == std::string_view::npos) {
          return std::nullopt;
        }
        out += utf8(static_cast<char32_t>(
            std::stoul(std::string(s.substr(i + 2, close - i - 2)), nullptr, 16)));
        i = close;
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return out;
}

// What a terminal may act on, found in `s`: a byte below 0x20 (but \n when `newlines`), DEL,
// a C1 control, a bidi/invisible character, or a byte that is not UTF-8. "" when none.
std::string hazard(std::string_view s, bool newlines = false) {
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && !(newlines && c == '\n')) || c == 0x7f) {
      return "control byte at " + std::to_string(i);
    }
    if (c < 0x80) continue;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0 || i + len > s.size()) return "bad UTF-8 at " + std::to_string(i);
    char32_t cp = c & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return "bad UTF-8 at " + std::to_string(i);
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((cp >= 0x80 && cp <= 0x9F) || (cp >= 0x200B && cp <= 0x200F) ||
        (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F) || cp == 0x061C ||
        cp == 0xFEFF || cp == 0x00AD || (cp >= 0xE0000 && cp <= 0xE007F) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "U+%04X at %zu", static_cast<unsigned>(cp), i);
      return buf;
    }
    i += len - 1;
  }
  return "";
}

TEST(EscapeText, LeavesOrdinaryTextAlone) {
  for (std::string s : {"", "hello world", "/usr/bin/python3 -c 'x = 1'", "caf\u00e9", "e\u0301",
                        "\u65e5\u672c\u8a9e", "\U0001F600 \U0001F44D\U0001F3FD",
                        "\u05e9\u05dc\u05d5\u05dd", "tab-free ~!@#$%^&*()_+{}|:\"<>?"}) {
    EXPECT_EQ(escape_text(s), s);
  }
}

TEST(EscapeText, BackslashAndCommonControls) {
  EXPECT_EQ(escape_text("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_text("\\n"), "\\\\n");  // a backslash and an n, not a newline
  EXPECT_EQ(escape_text("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(escape_text("ok\r\n999  1  0  S  exit 0"), "ok\\r\\n999  1  0  S  exit 0");
}

TEST(EscapeText, OtherC0AndDel) {
  EXPECT_EQ(escape_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_text("\x1b[2K\x1b[1A\x1b[31mred"), "\\x1b[2K\\x1b[1A\\x1b[31mred");
  EXPECT_EQ(escape_text("\x1b]52;c;ZXZpbA==\x07"), "\\x1b]52;c;ZXZpbA==\\x07");
  EXPECT_EQ(escape_text("\x1b]8;;http://e/\x1b\\x\x1b]8;;\x1b\\"),
            "\\x1b]8;;http://e/\\x1b\\\\x\\x1b]8;;\\x1b\\\\");
  EXPECT_EQ(escape_text("\x08\x0b\x0c\x1f\x7f"), "\\x08\\x0b\\x0c\\x1f\\x7f");
}

TEST(EscapeText, C1ControlsAsCodePoints) {
  EXPECT_EQ(escape_text("\u009b2J"), "\\u{009b}2J");  // CSI
  EXPECT_EQ(escape_text("a\u0085b"), "a\\u{0085}b");  // NEL, a line break to some terminals
  EXPECT_EQ(escape_text("\u0080\u009f"), "\\u{0080}\\u{009f}");
  EXPECT_EQ(escape_text("\u00a0"), "\u00a0");  // the first code point after C1 is printable
}

TEST(EscapeText, BidiAndInvisibleCharacters) {
  EXPECT_EQ(escape_text("abc\u202egnp.exe"), "abc\\u{202e}gnp.exe");
  for (char32_t cp :
       {0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F,
        0x061C, 0x2028, 0x2029, 0x200B, 0x200C, 0x200D, 0xFEFF, 0x2060, 0x00AD, 0xE0041}) {
    char want[16];
    std::snprintf(want, sizeof want, "\\u{%04x}", static_cast<unsigned>(cp));
    EXPECT_EQ(escape_text("x" + utf8(cp) + "y"), std::string("x") + want + "y")
        << std::hex << static_cast<unsigned>(cp);
  }
}

TEST(EscapeText, BytesThatAreNotUtf8) {
  EXPECT_EQ(escape_text("raw\x9b"
                        "2J"),
            "raw\\x9b2J");  // a lone C1-range byte
  EXPECT_EQ(escape_text("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(escape_text("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(escape_text("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  EXPECT_EQ(escape_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(escape_text("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(escape_text("cut\xe2\x80"), "cut\\xe2\\x80");              // cut short at the end
  EXPECT_EQ(escape_text("cut\xe2\x80"
                        "A"),
            "cut\\xe2\\x80A");                                     // cut short by ASCII
  EXPECT_EQ(escape_text("\xc2\xc2\x9b"), "\\xc2\\u{009b}");        // a lead byte, then C1
  EXPECT_EQ(escape_text("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");  // valid 4 bytes stay
}

// Random strings made of the pieces above decode back to themselves (so no two inputs share
// an output), and the output holds nothing a terminal acts on.
TEST(EscapeText, RoundTripsAndIsSafeOnRandomInput) {
  const std::vector<std::string> pieces = {"a",
                                           "\\",
                                           "\\x1b",
                                           "\\u{202e}",
                                           "x",
                                           "{",
                                           "}",
                                           "\n",
                                           "\r",
                                           "\t",
                                           "\x1b",
                                           "\x7f",
                                           std::string(1, '\0'),
                                           "\u009b",
                                           "\u0085",
                                           "\u202e",
                                           "\u2066",
                                           "\u2028",
                                           "\u200d",
                                           "\ufeff",
                                           "\U000E0041",
                                           "\u65e5",
                                           "\U0001F600",
                                           "\x9b",
                                           "\xff",
                                           "\xc0",
                                           "\xe2\x80",
                                           "\xed\xa0\x80",
                                           "\xf0\x9f",
                                           "caf\u00e9"};
  std::mt19937 rng(12345);
  for (int round = 0; round < 5000; ++round) {
    std::string s;
    size_t n = rng() % 12;
    for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
    if (round % 2 == 1) {  // and raw random bytes
      for (size_t i = 0; i < 8; ++i) s += static_cast<char>(rng() & 0xFF);
    }
    std::string e = escape_text(s);
    auto back = unescape(e);
    ASSERT_TRUE(back.has_value()) << e;
    ASSERT_EQ(*back, s) << e;
    ASSERT_EQ(hazard(e), "") << e;
  }
}

TEST(DisplayWidth, CountsColumns) {
  EXPECT_EQ(display_width(""), 0u);
  EXPECT_EQ(display_width("abc"), 3u);
  EXPECT_EQ(display_width("caf\u00e9"), 4u);
  EXPECT_EQ(display_width("e\u0301"), 1u);                 // a combining accent
  EXPECT_EQ(display_width("\u65e5\u672c"), 4u);            // CJK: two columns each
  EXPECT_EQ(display_width("\uff21"), 2u);                  // fullwidth A
  EXPECT_EQ(display_width("\U0001F600"), 2u);              // emoji
  EXPECT_EQ(display_width("\U0001F44D\U0001F3FD"), 2u);    // with a skin tone modifier
  EXPECT_EQ(display_width("\u2764\ufe0f"), 1u);            // a variation selector adds none
  EXPECT_EQ(display_width(escape_text("a\u202eb")), 10u);  // a\u{202e}b
  EXPECT_EQ(display_width("\xff"), 1u);
}

TEST(FormatTable, EscapesCellsAndAlignsOnWhatIsShown) {
  std::string t = format_table({{"PID", "COMMAND", "X"},
                                {"1", "\u65e5\u672c", "a"},
                                {"22", "a\nb\x1b[1A", "b"},
                                {"3", "r\u202el", "c"}});
  EXPECT_EQ(t,
            "PID  COMMAND      X\n"
            "1    \u65e5\u672c         a\n"
            "22   a\\nb\\x1b[1A  b\n"
            "3    r\\u{202e}l   c\n");
  EXPECT_EQ(hazard(t, true), "");
}

TEST(DumpJson, WritesHazardsAsEscapesAndStaysValid) {
  std::string hostile = "\x1b[31m\u202e\u2066\u2028\x7f\u009b\u0085\U000E0041\r\n";
  json j = {{"argv", {"sleep", hostile, "\u65e5\U0001F600"}}, {"n", 1}};
  for (int indent : {-1, 2}) {
    std::string text = dump_json(j, indent);
    EXPECT_EQ(hazard(text, true), "") << text;
    EXPECT_EQ(json::parse(text), j) << text;  // the same value, only spelled safely
    EXPECT_NE(text.find("\\u001b[31m\\u202e\\u2066\\u2028\\u007f\\u009b\\u0085\\udb40\\udc41"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\u65e5\U0001F600"), std::string::npos) << text;  // raw, readable
  }
  EXPECT_EQ(dump_json(json("plain")), "\"plain\"");
}

TEST(DumpJson, BytesThatAreNotUtf8DoNotThrow) {
  json j = {{"path", std::string("/root/raw\x9b"
                                 "2J\xff\xe2\x80")}};
  std::string text;
  ASSERT_NO_THROW(text = dump_json(j));
  EXPECT_EQ(hazard(text), "") << text;
  // Each bad byte, or cut-short sequence, as U+FFFD.
  EXPECT_EQ(json::parse(text)["path"], "/root/raw\ufffd2J\ufffd\ufffd");
}

TEST(FormatAuditEvent, EscapesEveryField) {
  json ev = {{"seq", 7},
             {"ts", 0.0},
             {"kind", "proc.exec"},
             {"data",
              {{"pid", 5},
               {"ppid", 1},
               {"uid", 0},
               {"path", "/bin/\u202eexe"},
               {"cwd", "/root\r\nFORGED"},
               {"argv", {"sleep", "ok\r\nFORGED  exit 0", "\x1b[2J\u009b\u2028"}}}}};
  std::string line = format_audit_event(ev);
  EXPECT_EQ(hazard(line.substr(0, line.size() - 1)), "") << line;
  EXPECT_EQ(line.back(), '\n');
  EXPECT_NE(line.find("exe=/bin/\\u{202e}exe cwd=/root\\r\\nFORGED argv: sleep "
                      "'ok\\r\\nFORGED  exit 0' '\\x1b[2J\\u{009b}\\u{2028}'"),
            std::string::npos)
      << line;
  json other = {{"seq", 8}, {"ts", 0.0}, {"kind", "x.\u202enew"}, {"data", {{"k", "\x1b\u2066"}}}};
  EXPECT_EQ(format_audit_event(other),
            "1970-01-01T00:00:00.000Z  8  x.\\u{202e}new  {\"k\":\"\\u001b\\u2066\"}\n");
}

TEST(FormatAuditEvent, GuestReportedExecsAndTheirDrops) {
  json exec = {{"seq", 3},
               {"ts", 0.0},
               {"kind", "proc.exec"},
               {"data",
                {{"pid", 87},
                 {"ppid", 85},
                 {"uid", 0},
                 {"path", "/bin/ls"},
                 {"cwd", "/root"},
                 {"argv", {"/bin/ls", "/"}},
                 {"stream", 7},
                 {"guest_reported", true}}}};
  EXPECT_EQ(format_audit_event(exec),
            "1970-01-01T00:00:00.000Z  3  proc.exec  pid=87 ppid=85 uid=0 exe=/bin/ls cwd=/root "
            "argv: /bin/ls / (guest-reported)\n");
  json dropped = {
      {"seq", 4},
      {"ts", 0.0},
      {"kind", "proc.exec_dropped"},
      {"data", {{"count", 12}, {"rate_limited", 10}, {"dropped_by_guest", 2}, {"malformed", 0}}}};
  EXPECT_EQ(format_audit_event(dropped),
            "1970-01-01T00:00:00.000Z  4  proc.exec_dropped  count=12 rate_limited=10 "
            "dropped_by_guest=2 malformed=0\n");
}

// A service whose sandbox says hostile things: in process argv, file paths and audit events.
const std::string kHostile =
    "ok\r\nFORGED  exit 0\x1b[2K\x1b]52;c;ZXZpbA==\x07\u009b2J\u202egnp.exe\u2066\u2069\u200f"
    "\u2028\x7f\\";

class HostileService : public api::testing::FakeService {
 public:
  Result<std::vector<daemon::ProcessInfo>> processes(const std::string& id) override {
    TRY(inspect(id));
    return std::vector<daemon::ProcessInfo>{
        {.pid = 7, .ppid = 1, .uid = 0, .state = "S", .argv = {"sleep", kHostile}}};
  }
  Result<daemon::Diff> diff(const std::string& id) override {
    TRY(inspect(id));
    return daemon::Diff{.added = {"/root/" + kHostile}};
  }
  Result<std::vector<daemon::AuditEvent>> audit_events(const std::string& id, int64_t after,
                                                       size_t limit) override {
    if (after >= 1) return std::vector<daemon::AuditEvent>{};
    json data = {{"pid", 7}, {"path", "/bin/sleep"}, {"argv", {"sleep", kHostile}}};
    return std::vector<daemon::AuditEvent>{
        {.sandbox_id = id, .seq = 1, .ts = 0.0, .kind = "proc.exec", .data_json = data.dump()}};
  }
};

class HostileOutputTest : public testing::ServedCli<HostileService> {
 protected:
  void SetUp() override {
    ServedCli::SetUp();
    id_ = text({"create"});
    id_ = id_.substr(0, id_.find('\n'));
  }

  // stdout and stderr of one command that must succeed, together.
  std::string text(std::vector<std::string> argv) {
    testing::Captured c = run(std::move(argv));
    EXPECT_TRUE(c.result && *c.result == 0) << c.out << c.err;
    return c.out + c.err;
  }

  std::string id_;
};

TEST_F(HostileOutputTest, PsDiffAuditShowSandboxTextEscaped) {
  const std::string shown = escape_text(kHostile);
  std::string ps = text({"ps", id_});
  EXPECT_EQ(hazard(ps, true), "") << ps;
  EXPECT_EQ(ps, "PID  PPID  UID  STATE  COMMAND\n7    1     0    S      sleep " + shown + "\n");

  std::string diff = text({"diff", id_});
  EXPECT_EQ(hazard(diff, true), "") << diff;
  EXPECT_EQ(diff, "A /root/" + shown + "\n");

  std::string audit = text({"audit", id_});
  EXPECT_EQ(hazard(audit, true), "") << audit;
  EXPECT_EQ(std::count(audit.begin(), audit.end(), '\n'), 1) << audit;
  EXPECT_NE(audit.find("'" + shown + "'"), std::string::npos) << audit;
}

TEST_F(HostileOutputTest, JsonOutputIsSafeAndCarriesTheSameText) {
  std::string ps = text({"ps", id_, "--json"});
  EXPECT_EQ(hazard(ps, true), "") << ps;
  EXPECT_EQ(json::parse(ps)[0]["argv"][1], kHostile);

  std::string diff = text({"diff", id_, "--json"});
  EXPECT_EQ(hazard(diff, true), "") << diff;
  EXPECT_EQ(json::parse(diff)["added"][0], "/root/" + kHostile);

  std::string audit = text({"audit", id_, "--json"});
  EXPECT_EQ(hazard(audit, true), "") << audit;
  EXPECT_EQ(std::count(audit.begin(), audit.end(), '\n'), 1) << audit;
  EXPECT_EQ(json::parse(audit)["data"]["argv"][1], kHostile);
}

TEST(Report, EscapesTheMessage) {
  testing::Captured c = testing::capture([] {
    return Result<int>(
        report(Error(Code::kProtocol, "refusing archive entry a\r\nFORGED\x1b[2K\u202e")));
  });
  EXPECT_EQ(*c.result, kExitSpaceFailed);
  EXPECT_EQ(c.err, "space: refusing archive entry a\\r\\nFORGED\\x1b[2K\\u{202e}\n");
}

}  // namespace
}  // namespace space::cli

// The `proc_exec` payload (proto/exec_report.h): what the agent encodes decodes to the same
// records; the daemon's decoder refuses payloads of the wrong shape, leaves out records of the
// wrong shape (counted), keeps only the documented fields and cuts every string and argv to
// its bounds.
#include "proto/exec_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proto/frame.h"

namespace space::proto {
namespace {

using nlohmann::json;

json record() {
  return {{"syscall", "execve"},
          {"pid", 42},
          {"ppid", 7},
          {"uid", 1000},
          {"cwd", "/root"},
          {"path", "/bin/ls"},
          {"resolved", "/bin/ls"},
          {"argv", {"ls", "-l"}},
          {"stream", 5}};
}

TEST(ExecReport, RoundTrip) {
  std::vector<std::string> records = {record().dump(), json(record()).dump()};
  std::string payload = encode_exec_report(records, 3);
  auto r = decode_exec_report(payload);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->dropped, 3u);
  EXPECT_EQ(r->malformed, 0u);
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[0], record());
  // Nothing at all is a valid report too (only drops to tell).
  auto empty = decode_exec_report(encode_exec_report({}, 9));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->events.empty());
  EXPECT_EQ(empty->dropped, 9u);
}

TEST(ExecReport, PayloadOfTheWrongShapeIsAProtocolError) {
  for (const std::string& bad :
       std::vector<std::string>{"", "not json", "[]", "{}", R"({"events":{}})", R"({"events":"x"})",
                                R"({"events":[],"dropped":-1})", R"({"events":[],"dropped":"1"})",
                                R"({"events":[],"dropped":1.5})",
                                // Not UTF-8 inside a string.
                                std::string("{\"events\":[\"\xff\"]}")}) {
    auto r = decode_exec_report(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code(), Code::kProtocol) << bad;
  }
  std::string deep = R"({"events":[)" + std::string(100, '[') + std::string(100, ']') + "]}";
  EXPECT_FALSE(decode_exec_report(deep));
  std::string many = R"({"events":[)";
  for (size_t i = 0; i <= kMaxReportEvents; ++i) many += (i ? ",1" : "1");
  many += "]}";
  EXPECT_FALSE(decode_exec_report(many));
}

TEST(ExecReport, MalformedRecordsAreLeftOutAndCounted) {
  std::vector<json> bad = {
      json(1),
      json::object(),
      json{{"syscall", "open"}},
      json{{"syscall", 59}},
      json{{"syscall", "execve"}, {"pid", "42"}},
      json{{"syscall", "execve"}, {"pid", 0}},
      json{{"syscall", "execve"}, {"pid", -3}},
      json{{"syscall", "execve"}, {"uid", 1ull << 40}},
      json{{"syscall", "execve"}, {"argv", "ls"}},
      json{{"syscall", "execve"}, {"argv", {"ls", 3}}},
      json{{"syscall", "execve"}, {"cwd", 5}},
      json{{"syscall", "execve"}, {"fileless", "yes"}},
      json{{"syscall", "execve"}, {"abi", "mips"}},
      json{{"syscall", "execve"}, {"stream", 0}},
      json{{"syscall", "execve"}, {"stream", kAgentStreamBit | 1}},
  };
  std::vector<std::string> records;
  for (const json& b : bad) records.push_back(b.dump());
  records.push_back(record().dump());
  auto r = decode_exec_report(encode_exec_report(records, 0));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->malformed, bad.size());
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_EQ(r->events[0], record());
}

TEST(ExecReport, KeepsOnlyDocumentedFieldsAndFillsTheRest) {
  json in = {{"syscall", "execveat"}, {"guest_reported", false}, {"host_pid", 1}, {"seq", 99},
             {"caller_gone", true},   {"fileless", false},       {"abi", "i386"}, {"fd", -100},
             {"at_empty_path", true}};
  auto out = normalize_exec_record(in);
  ASSERT_TRUE(out);
  // A guest cannot claim to be the host, or set what the daemon decides.
  EXPECT_FALSE(out->contains("guest_reported"));
  EXPECT_FALSE(out->contains("host_pid"));
  EXPECT_FALSE(out->contains("seq"));
  EXPECT_FALSE(out->contains("fileless"));  // false flags are not kept
  EXPECT_EQ((*out)["caller_gone"], true);
  EXPECT_EQ((*out)["at_empty_path"], true);
  EXPECT_EQ((*out)["abi"], "i386");
  EXPECT_EQ((*out)["fd"], -100);
  // Always there, null when the guest did not say.
  for (const char* k : {"pid", "ppid", "uid", "cwd", "path", "resolved", "stream"})
    EXPECT_TRUE((*out)[k].is_null()) << k;
  EXPECT_EQ((*out)["argv"], json::array());
}

TEST(ExecReport, CutsStringsAndArgvToTheBounds) {
  json in = record();
  in["path"] = std::string(kMaxReportedPathBytes + 10, 'p');
  in["cwd"] = std::string(kMaxReportedPathBytes + 10, 'c');
  in["resolved"] = std::string(kMaxReportedResolvedBytes + 10, 'r');
  json argv = json::array();
  for (size_t i = 0; i < kMaxExecArgs + 5; ++i) argv.push_back("a");
  argv[0] = std::string(kMaxExecArgBytes + 1, 'x');
  in["argv"] = argv;
  auto out = normalize_exec_record(in);
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)["path"].get<std::string>().size(), kMaxReportedPathBytes);
  EXPECT_EQ((*out)["path_truncated"], true);
  EXPECT_EQ((*out)["cwd"].get<std::string>().size(), kMaxReportedPathBytes);
  EXPECT_EQ((*out)["resolved"].get<std::string>().size(), kMaxReportedResolvedBytes);
  EXPECT_EQ((*out)["argv"].size(), kMaxExecArgs);
  EXPECT_EQ((*out)["argv"][0].get<std::string>().size(), kMaxExecArgBytes);
  EXPECT_EQ((*out)["argv_truncated"], true);

  // All arguments together: at most kMaxReportedArgvBytes.
  json big = record();
  big["argv"] = json::array();
  for (int i = 0; i < 100; ++i) big["argv"].push_back(std::string(kMaxExecArgBytes, 'y'));
  out = normalize_exec_record(big);
  ASSERT_TRUE(out);
  size_t total = 0;
  for (auto& a : (*out)["argv"]) total += a.get<std::string>().size();
  EXPECT_EQ(total, kMaxReportedArgvBytes);
  EXPECT_EQ((*out)["argv_truncated"], true);
}

TEST(ExecReport, CutsNeverSplitAUtf8Sequence) {
  json in = record();
  // 'é' is two bytes; an odd bound would fall inside one.
  std::string s;
  while (s.size() < kMaxExecArgBytes + 4) s += "\xc3\xa9";
  in["argv"] = {std::string("x") + s};
  auto out = normalize_exec_record(in);
  ASSERT_TRUE(out);
  std::string a = (*out)["argv"][0];
  EXPECT_LE(a.size(), kMaxExecArgBytes);
  EXPECT_NE(static_cast<unsigned char>(a.back()), 0xc3u);  // no dangling lead byte
  EXPECT_NO_THROW((void)json(a).dump());                   // still valid UTF-8
}

}  // namespace
}  // namespace space::proto

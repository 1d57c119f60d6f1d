// The manifest's sealed JSON form on its own: every field survives seal/unseal (including
// non-UTF-8 names, binary xattr values, negative times, large inode numbers), the MAC binds the
// exact bytes, and validate() rejects what restore could not safely materialize.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

const std::string kKey(32, 'm');

Entry dir(const std::string& path) {
  Entry e;
  e.type = Entry::Type::kDir;
  e.path = path;
  e.mode = 0755;
  return e;
}

Entry file(const std::string& path, uint64_t size, std::vector<std::string> chunks) {
  Entry e;
  e.type = Entry::Type::kFile;
  e.path = path;
  e.mode = 0644;
  e.size = size;
  e.chunks = std::move(chunks);
  return e;
}

Manifest sample() {
  Manifest m;
  m.id = "snap_abc";
  m.parent = "snap_parent";
  m.labels = {{"sandbox", "sb_1"}, {"name", "before upgrade ✓"}};
  m.created_at = 1764681234.123456;
  m.logical_bytes = 12;
  m.new_bytes = 7;
  m.reused_files = 1;
  m.skipped = {"dev/sd\xff: device node, not captured"};
  m.entries.push_back(dir(""));
  m.entries.back().xattrs["trusted.overlay.opaque"] = "y";
  Entry f = file("bin\xff\xfe", 12, {std::string(64, 'a')});
  f.uid = 100000;
  f.gid = 4294967295u;
  f.mtime_ns = -1'500'000'000;
  f.ctime_ns = 1'700'000'000'123'456'789;
  f.ino = 18446744073709551615ull;
  f.dev = 2049;
  f.xattrs["user.bin"] = std::string("\0\x01\xff", 3);
  f.xattrs["security.capability"] = std::string(20, '\x02');
  m.entries.push_back(f);
  Entry link = file("bin\xff\xfe.link", 12, {});
  link.hardlink_to = "bin\xff\xfe";
  m.entries.push_back(link);
  m.entries.push_back(dir("d"));
  m.entries.back().mode = 01777;
  Entry fifo;
  fifo.type = Entry::Type::kOther;
  fifo.path = "d/fifo";
  fifo.mode = S_IFIFO | 0640;
  m.entries.push_back(fifo);
  Entry sl;
  sl.type = Entry::Type::kSymlink;
  sl.path = "d/link";
  sl.mode = 0777;
  sl.target = "../../\xff/etc";
  m.entries.push_back(sl);
  Entry wh;
  wh.type = Entry::Type::kWhiteout;
  wh.path = "d/wh";
  m.entries.push_back(wh);
  return m;
}

TEST(Manifest, SealUnsealKeepsEveryField) {
  Manifest m = sample();
  ASSERT_TRUE(validate(m, {})) << validate(m, {}).error().message();
  std::string text = seal(m, kKey);
  auto back = unseal(text, "snap_abc", kKey, {});
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(to_json(*back), to_json(m));
  EXPECT_EQ(seal(*back, kKey), text);  // stable: the same manifest seals to the same bytes
  const Entry& f = back->entries[1];
  EXPECT_EQ(f.path, "bin\xff\xfe");
  EXPECT_EQ(f.xattrs.at("user.bin"), std::string("\0\x01\xff", 3));
  EXPECT_EQ(f.mtime_ns, -1'500'000'000);
  EXPECT_EQ(f.ino, 18446744073709551615ull);
  EXPECT_EQ(f.gid, 4294967295u);
  EXPECT_EQ(back->entries[2].hardlink_to, "bin\xff\xfe");
  EXPECT_EQ(back->entries[5].target, "../../\xff/etc");
  EXPECT_EQ(back->entries[4].mode, S_IFIFO | 0640u);
  EXPECT_EQ(back->skipped, m.skipped);
  EXPECT_EQ(back->created_at, m.created_at);
  EXPECT_EQ(back->labels, m.labels);
  // Non-UTF-8 bytes are carried as hex, never as invalid JSON strings.
  EXPECT_NE(text.find(R"({"hex":"62696efffe"})"), std::string::npos);
}

TEST(Manifest, TheMacCoversEveryByte) {
  std::string text = seal(sample(), kKey);
  for (size_t pos = 85; pos + 1 < text.size(); pos += 37) {
    std::string bad = text;
    bad[pos] = bad[pos] == ' ' ? '!' : ' ';
    auto r = unseal(bad, "snap_abc", kKey, {});
    ASSERT_FALSE(r) << "byte " << pos;
    EXPECT_NE(r.error().message().find("MAC"), std::string::npos) << r.error().message();
  }
  EXPECT_FALSE(unseal(text, "snap_abc", std::string(32, 'n'), {}));
}

TEST(Manifest, ValidateRefusesWhatRestoreCouldNotDoSafely) {
  struct Case {
    const char* what;
    const char* needle;  // in the error: it fails for the reason the case is about
    std::function<void(Manifest&)> edit;
  } cases[] = {
      {"no root", "root directory", [](Manifest& m) { m.entries.erase(m.entries.begin()); }},
      {"root not a dir", "root directory",
       [](Manifest& m) { m.entries[0].type = Entry::Type::kFile; }},
      {"dotdot", "'..'", [](Manifest& m) { m.entries[3].path = ".."; }},
      {"dot", "'..'", [](Manifest& m) { m.entries[4].path = "d/./fifo"; }},
      {"trailing slash", "empty component", [](Manifest& m) { m.entries[4].path = "d/fifo/"; }},
      {"parent missing", "not beneath", [](Manifest& m) { m.entries[4].path = "e/fifo"; }},
      {"parent a symlink", "not beneath",
       [](Manifest& m) {
         m.entries[3].type = Entry::Type::kSymlink;
         m.entries[3].target = "/";
       }},
      {"parent a file", "not beneath", [](Manifest& m) { m.entries[2].path = "bin\xff\xfe/x"; }},
      {"duplicate", "out of order or repeated", [](Manifest& m) { m.entries[6].path = "d/link"; }},
      {"link forward", "no earlier path", [](Manifest& m) { m.entries[2].hardlink_to = "d/wh"; }},
      {"link to a link", "other than a file",
       [](Manifest& m) {
         Entry l = m.entries[2];
         l.path = "bin\xff\xfe.link2";
         l.hardlink_to = "bin\xff\xfe.link";
         m.entries.insert(m.entries.begin() + 3, l);
       }},
      {"link with data", "own data",
       [](Manifest& m) { m.entries[2].chunks = {std::string(64, 'b')}; }},
      {"link size", "own data", [](Manifest& m) { m.entries[2].size = 13; }},
      {"empty file with chunks", "cannot hold", [](Manifest& m) { m.entries[1].size = 0; }},
      {"chunks too few", "cannot hold", [](Manifest& m) { m.entries[1].size = (4 << 20) + 1; }},
      {"bad chunk", "malformed chunk id", [](Manifest& m) { m.entries[1].chunks = {"xyz"}; }},
      {"dir with chunks", "not a file",
       [](Manifest& m) { m.entries[3].chunks = {std::string(64, 'c')}; }},
      {"symlink empty", "target", [](Manifest& m) { m.entries[5].target.clear(); }},
      {"symlink NUL", "target", [](Manifest& m) { m.entries[5].target = std::string("a\0b", 3); }},
      {"fifo as dir bits", "neither a fifo",
       [](Manifest& m) { m.entries[4].mode = S_IFDIR | 0755; }},
      {"dir with type bits", "file-type bits",
       [](Manifest& m) { m.entries[3].mode = S_IFDIR | 0755; }},
      {"mode high bits", "invalid mode", [](Manifest& m) { m.entries[3].mode = 1u << 20; }},
      {"xattr namespace", "kept namespaces",
       [](Manifest& m) { m.entries[1].xattrs["security.selinux"] = "x"; }},
      {"bad id", "invalid id", [](Manifest& m) { m.id = "../snap"; }},
      {"bad label", "not UTF-8", [](Manifest& m) { m.labels["x"] = "\xff"; }},
      {"too deep", "deeper than 256",
       [](Manifest& m) {
         std::string p;
         for (int i = 0; i < 257; ++i) {
           p += (p.empty() ? "" : "/") + std::string("d");
           m.entries.push_back(dir(p));
         }
         std::sort(m.entries.begin(), m.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.path < b.path; });
         // "d" itself is there twice now: drop the sample's.
         m.entries.erase(
             std::adjacent_find(m.entries.begin(), m.entries.end(),
                                [](const Entry& a, const Entry& b) { return a.path == b.path; }));
       }},
  };
  for (const Case& c : cases) {
    Manifest m = sample();
    c.edit(m);
    auto r = validate(m, {});
    EXPECT_FALSE(r) << c.what;
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kProtocol) << c.what;
      EXPECT_NE(r.error().message().find(c.needle), std::string::npos)
          << c.what << ": " << r.error().message();
    }
  }
  StoreOptions few;
  few.max_entries = 3;
  EXPECT_FALSE(validate(sample(), few));
}

}  // namespace
}  // namespace space::snapshot::detail

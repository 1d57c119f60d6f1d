// `space image build`'s client side without a daemon: its arguments and the query they become
// (build_query), the .dockerignore matcher against Docker's rules (dockerignore.h), and the tar
// writer's filter (what a context with a .dockerignore sends, the directories it looks into, a
// Dockerfile appended from outside).
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/args.h"
#include "cli/dockerignore.h"
#include "cli/tar.h"
#include "served_cli.h"

namespace space::cli {
namespace {

namespace fs = std::filesystem;
using testing::Captured;

ParseOutcome parse(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "space");
  return parse_args(argv);
}

TEST(ImageBuildArgs, EveryOption) {
  ParseOutcome p =
      parse({"image",     "build",       "agent-env",    "-f",          "docker/Dockerfile.dev",
             "ctx",       "--build-arg", "A=1",          "--build-arg", "B=x=y",
             "--profile", "build",       "--secret",     "pypi",        "--secret",
             "npm",       "--allow",     "pypi.org:443", "--no-cache",  "--step-timeout",
             "10m",       "--json",      "--quiet"});
  ASSERT_TRUE(p.args) << p.err;
  const Args& a = *p.args;
  EXPECT_EQ(a.command, "image build");
  EXPECT_EQ(a.name, "agent-env");
  EXPECT_EQ(a.path, "ctx");
  EXPECT_EQ(a.file, "docker/Dockerfile.dev");
  EXPECT_EQ(a.build_args, (std::vector<std::string>{"A=1", "B=x=y"}));
  EXPECT_EQ(a.sandbox.profile, "build");
  EXPECT_EQ(a.sandbox.secrets, (std::vector<std::string>{"pypi", "npm"}));
  EXPECT_EQ(a.sandbox.allow, std::vector<std::string>{"pypi.org:443"});
  EXPECT_TRUE(a.no_cache);
  EXPECT_EQ(a.step_timeout, "10m");
  EXPECT_TRUE(a.json);
  EXPECT_TRUE(a.quiet);

  auto q = build_query(a, "docker/Dockerfile.dev");
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(*q,
            "?dockerfile=docker/Dockerfile.dev&profile=build&no_cache=true&step_timeout=600"
            "&build_args=%7B%22A%22%3A%221%22%2C%22B%22%3A%22x%3Dy%22%7D&secrets=pypi%2Cnpm"
            "&allow=pypi.org%3A443");
}

TEST(ImageBuildArgs, Defaults) {
  ParseOutcome p = parse({"image", "build", "app"});
  ASSERT_TRUE(p.args) << p.err;
  EXPECT_EQ(p.args->path, "");  // the working directory
  EXPECT_EQ(p.args->file, "");
  EXPECT_FALSE(p.args->no_cache);
  auto q = build_query(*p.args, "Dockerfile");
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(*q, "?dockerfile=Dockerfile");
}

TEST(ImageBuildArgs, UsageErrors) {
  ParseOutcome p = parse({"image", "build"});
  EXPECT_FALSE(p.args);
  EXPECT_EQ(p.exit_code, 125);
  EXPECT_NE(p.err.find("name"), std::string::npos) << p.err;
  p = parse({"image", "build", "app", "ctx", "extra"});
  EXPECT_FALSE(p.args);
  EXPECT_EQ(p.exit_code, 125);
  p = parse({"image", "build", "app", "--", "make"});
  EXPECT_FALSE(p.args);
  EXPECT_NE(p.err.find("takes no command"), std::string::npos) << p.err;
}

TEST(ImageBuildArgs, BadValuesAreRefusedBeforeSending) {
  auto query_error = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"image", "build", "app"});
    ParseOutcome p = parse(argv);
    EXPECT_TRUE(p.args) << p.err;
    auto q = build_query(p.args.value_or(Args{}), "Dockerfile");
    EXPECT_FALSE(q) << *q;
    return q ? std::string() : q.error().message();
  };
  EXPECT_NE(query_error({"--step-timeout", "soon"}).find("--step-timeout"), std::string::npos);
  EXPECT_NE(query_error({"--step-timeout", "0"}).find("greater than 0"), std::string::npos);
  EXPECT_NE(query_error({"--step-timeout", "2d"}).find("at most 24h"), std::string::npos);
  EXPECT_NE(query_error({"--build-arg", "=1"}).find("expected K=V"), std::string::npos);
  EXPECT_NE(query_error({"--secret", "a,b"}).find("without commas"), std::string::npos);
  EXPECT_NE(query_error({"--allow", "x.org,y.org"}).find("without commas"), std::string::npos);
}

TEST(ImageBuildArgs, BuildArgWithoutValueTakesTheEnvironment) {
  ::setenv("SPACE_TEST_BUILD_ARG", "from env", 1);
  ::unsetenv("SPACE_TEST_UNSET_ARG");
  ParseOutcome p = parse({"image", "build", "app", "--build-arg", "SPACE_TEST_BUILD_ARG",
                          "--build-arg", "SPACE_TEST_UNSET_ARG"});
  ASSERT_TRUE(p.args) << p.err;
  auto q = build_query(*p.args, "Dockerfile");
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(*q,
            "?dockerfile=Dockerfile&build_args=%7B%22SPACE_TEST_BUILD_ARG%22%3A%22from%20env%22"
            "%7D");
  ::unsetenv("SPACE_TEST_BUILD_ARG");
}

DockerIgnore ignore(std::string_view text) {
  auto d = DockerIgnore::parse(text);
  EXPECT_TRUE(d) << d.error().message();
  return d.value_or(DockerIgnore{});
}

TEST(DockerIgnore, PlainNamesAndTheirContents) {
  DockerIgnore d = ignore("# a comment\n\n  node_modules  \n.git\n/build/\n./tmp//x/\n");
  EXPECT_EQ(d.size(), 4u);
  EXPECT_TRUE(d.excluded("node_modules"));
  EXPECT_TRUE(d.excluded("node_modules/left-pad/index.js"));
  EXPECT_TRUE(d.excluded(".git/HEAD"));
  EXPECT_TRUE(d.excluded("build"));
  EXPECT_TRUE(d.excluded("build/out.o"));
  EXPECT_TRUE(d.excluded("tmp/x/y"));
  // Anchored at the context root, unlike .gitignore.
  EXPECT_FALSE(d.excluded("src/node_modules"));
  EXPECT_FALSE(d.excluded("node_modules2"));
  EXPECT_FALSE(d.excluded("tmp"));
  EXPECT_FALSE(d.excluded("# a comment"));
  EXPECT_FALSE(d.excluded("src/app.py"));
}

TEST(DockerIgnore, Wildcards) {
  DockerIgnore d = ignore("*.pyc\nlogs/*.log\ndata/?.csv\nv[0-9].txt\nw[^a-c]\n");
  EXPECT_TRUE(d.excluded("x.pyc"));
  EXPECT_FALSE(d.excluded("src/x.pyc"));  // '*' stops at '/'
  EXPECT_TRUE(d.excluded("logs/a.log"));
  EXPECT_FALSE(d.excluded("logs/old/a.log"));
  EXPECT_TRUE(d.excluded("data/1.csv"));
  EXPECT_TRUE(d.excluded("data/\xC3\xA9.csv"));  // '?' is one character, not one byte
  EXPECT_FALSE(d.excluded("data/12.csv"));
  EXPECT_TRUE(d.excluded("v7.txt"));
  EXPECT_FALSE(d.excluded("vx.txt"));
  EXPECT_TRUE(d.excluded("wd"));
  EXPECT_FALSE(d.excluded("wb"));
  EXPECT_FALSE(d.excluded("w/"));
}

TEST(DockerIgnore, DoubleStar) {
  DockerIgnore d = ignore("**/*.tmp\ndocs/**/draft\ncache/**\n");
  EXPECT_TRUE(d.excluded("a.tmp"));
  EXPECT_TRUE(d.excluded("a/b/c.tmp"));
  EXPECT_TRUE(d.excluded("docs/draft"));
  EXPECT_TRUE(d.excluded("docs/2024/06/draft"));
  EXPECT_FALSE(d.excluded("docs/drafts"));
  EXPECT_TRUE(d.excluded("cache/x/y/z"));
  EXPECT_FALSE(d.excluded("cache"));  // "cache/**" is what is under it
  EXPECT_FALSE(d.excluded("cached/x"));
  EXPECT_TRUE(ignore("**").excluded("any/thing"));
}

TEST(DockerIgnore, ExceptionsAndTheLastMatchDecides) {
  DockerIgnore d = ignore("*.md\n!README.md\nREADME-secret.md\ndocs\n!docs/public\n");
  EXPECT_TRUE(d.has_exceptions());
  EXPECT_TRUE(d.excluded("CHANGES.md"));
  EXPECT_FALSE(d.excluded("README.md"));
  EXPECT_TRUE(d.excluded("README-secret.md"));
  EXPECT_TRUE(d.excluded("docs/internal/a.txt"));
  EXPECT_FALSE(d.excluded("docs/public/index.html"));
  // A later exclusion wins over an earlier exception.
  DockerIgnore e = ignore("!keep\n*\n");
  EXPECT_TRUE(e.excluded("keep"));
  EXPECT_FALSE(ignore("a\n").has_exceptions());
}

TEST(DockerIgnore, EscapesAndBom) {
  DockerIgnore d = ignore(
      "\xEF\xBB\xBF"
      "a\\*b\n\\#not-a-comment\n");
  EXPECT_TRUE(d.excluded("a*b"));
  EXPECT_FALSE(d.excluded("axb"));
  EXPECT_TRUE(d.excluded("#not-a-comment"));
}

TEST(DockerIgnore, MalformedPatternsAreRefusedWithTheirLine) {
  for (const char* text : {"ok\n[abc\n", "ok\n[]\n", "ok\n!\n", "ok\nx\\\n", "ok\n[z-a]\n"}) {
    auto d = DockerIgnore::parse(text);
    ASSERT_FALSE(d) << text;
    EXPECT_EQ(d.error().code(), Code::kInvalidArgument);
    EXPECT_NE(d.error().message().find("line 2"), std::string::npos) << d.error().message();
  }
}

TEST(DockerIgnore, LongHostilePatternsStayFast) {
  // A regular expression engine that backtracks takes exponential time on this.
  std::string pattern;
  for (int i = 0; i < 30; ++i) pattern += "*a";
  DockerIgnore d = ignore(pattern + "b\n");
  EXPECT_FALSE(d.excluded(std::string(4000, 'a')));
}

// The entries of tar archive `tar`: name -> content (directories: "/").
std::map<std::string, std::string> tar_entries(const std::string& tar) {
  std::map<std::string, std::string> entries;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string content;
    if (archive_entry_filetype(e) == AE_IFDIR) {
      content = "/";
    } else {
      char buf[4096];
      la_ssize_t n;
      while ((n = archive_read_data(a, buf, sizeof buf)) > 0) content.append(buf, n);
    }
    entries[archive_entry_pathname(e)] = content;
  }
  archive_read_free(a);
  return entries;
}

// The entries of a tar written with `options`, by name.
std::set<std::string> tar_names(const fs::path& dir, TarWriteOptions options) {
  std::string tar;
  auto r = write_tar(
      dir,
      [&](std::string_view b) -> Result<void> {
        tar.append(b);
        return {};
      },
      std::move(options));
  EXPECT_TRUE(r) << r.error().message();
  std::set<std::string> names;
  for (const auto& [name, content] : tar_entries(tar)) names.insert(name);
  return names;
}

TEST(ImageBuildContext, TarFollowsTheDockerIgnore) {
  char tmpl[] = "/tmp/space-build-ctx.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path root = tmpl;
  fs::path ctx = root / "ctx";
  for (const char* d : {"src", "node_modules/pkg", "docs/internal", "docs/public", ".git"}) {
    fs::create_directories(ctx / d);
  }
  for (const char* f :
       {"Dockerfile", ".dockerignore", "src/app.py", "src/app.pyc", "node_modules/pkg/index.js",
        "docs/internal/a", "docs/public/b", ".git/HEAD"}) {
    std::ofstream(ctx / f) << f;
  }
  std::ofstream(root / "Dockerfile.outside") << "FROM host\n";
  DockerIgnore d = ignore("node_modules\n.git\n**/*.pyc\ndocs\n!docs/public\n");
  TarWriteOptions o;
  o.filter = [&](const std::string& path, bool is_dir) {
    if (!d.excluded(path)) return TarFilter::kInclude;
    return is_dir && d.has_exceptions() ? TarFilter::kSkipButLookInside : TarFilter::kSkip;
  };
  o.extra_files = {{".dockerfile.00ff", root / "Dockerfile.outside"}};
  EXPECT_EQ(tar_names(ctx, o),
            (std::set<std::string>{"Dockerfile", ".dockerignore", "src/", "src/app.py", "docs/",
                                   "docs/public/", "docs/public/b", ".dockerfile.00ff"}));
  // Without exceptions an excluded directory is not even looked into.
  DockerIgnore plain = ignore("docs\n");
  std::vector<std::string> asked;
  TarWriteOptions p;
  p.filter = [&](const std::string& path, bool is_dir) {
    asked.push_back(path);
    return plain.excluded(path) ? TarFilter::kSkip : TarFilter::kInclude;
  };
  std::set<std::string> names = tar_names(ctx, p);
  EXPECT_FALSE(names.contains("docs/"));
  EXPECT_TRUE(names.contains("node_modules/pkg/index.js"));
  for (const auto& path : asked) EXPECT_FALSE(path.starts_with("docs/")) << path;
  fs::remove_all(root);
}

// A build that reads the whole context, replays `script` and ends with `failure` or an image.
class ScriptedBuild : public api::testing::FakeService {
 public:
  std::vector<daemon::BuildEvent> script;
  std::optional<Error> failure;
  daemon::BuildRequest last;
  std::string context;

  Result<daemon::ImageInfo> build_image(
      const std::string& name, const daemon::BuildRequest& req, const daemon::ChunkSource& source,
      const std::function<void(const daemon::BuildEvent&)>& progress) override {
    last = req;
    std::string chunk;
    for (;;) {
      TRY_VOID(source(chunk));
      if (chunk.empty()) break;
      context += chunk;
    }
    for (const auto& e : script) progress(e);
    if (failure) return fail(Error(*failure));
    return daemon::ImageInfo{.name = name,
                             .kind = "imported",
                             .size_bytes = 3 << 20,
                             .files = 9,
                             .format = "dockerfile"};
  }
};

class ImageBuildCommand : public testing::ServedCli<ScriptedBuild> {
 protected:
  void SetUp() override {
    ServedCli::SetUp();
    ctx_ = dir_ / "ctx";
    fs::create_directories(ctx_ / "logs");
    std::ofstream(ctx_ / "Dockerfile") << "FROM host\nRUN make\n";
    std::ofstream(ctx_ / ".dockerignore") << "secret.txt\nlogs\n";
    std::ofstream(ctx_ / "secret.txt") << "hunter2";
    std::ofstream(ctx_ / "app.py") << "print(1)";
    std::ofstream(ctx_ / "logs" / "x.log") << "log";
    using Kind = daemon::BuildEvent::Kind;
    svc_.script = {
        {.kind = Kind::kWarning, .text = "LABEL is kept as is"},
        {.kind = Kind::kStep, .step = 1, .of = 2, .text = "ENV A=1", .cached = true},
        {.kind = Kind::kStepDone, .step = 1, .cached = true},
        {.kind = Kind::kStep, .step = 2, .of = 2, .text = "RUN make"},
        {.kind = Kind::kOutput, .step = 2, .text = "cc -o app\r\n50%\r100%"},
        {.kind = Kind::kOutput, .step = 2, .text = "\n\x1b[31mred", .is_stderr = true},
        {.kind = Kind::kStepDone, .step = 2, .duration_s = 1.5},
    };
  }
  fs::path ctx_;
};

TEST_F(ImageBuildCommand, SendsTheContextAndPrintsTheSteps) {
  Captured r = run({"image", "build", "app", ctx_.native(), "--build-arg", "V=2", "--no-cache"});
  ASSERT_TRUE(r.result) << r.result.error().message();
  EXPECT_EQ(*r.result, 0) << r.err;
  EXPECT_EQ(r.out, "");
  // What .dockerignore leaves out is not sent; it and the Dockerfile are.
  auto entries = tar_entries(svc_.context);
  EXPECT_EQ(entries, (std::map<std::string, std::string>{{".dockerignore", "secret.txt\nlogs\n"},
                                                         {"Dockerfile", "FROM host\nRUN make\n"},
                                                         {"app.py", "print(1)"}}));
  EXPECT_EQ(svc_.last.dockerfile, "Dockerfile");
  EXPECT_EQ(svc_.last.build_args, (std::map<std::string, std::string>{{"V", "2"}}));
  EXPECT_TRUE(svc_.last.no_cache);
  // Docker's plain progress; the sandbox's output with its control characters made visible.
  EXPECT_NE(r.err.find("space: warning: LABEL is kept as is\n"
                       "Step 1/2 : ENV A=1\n"
                       " ---> cached\n"
                       "Step 2/2 : RUN make\n"
                       "cc -o app\n50%\n100%\n\\x1b[31mred\n"
                       " ---> done in 1.5s\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("space: built image app (3M, 2 steps, 1 cached) in "), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("hunter2"), std::string::npos);
}

TEST_F(ImageBuildCommand, QuietHidesTheOutputAndJsonPrintsTheEvents) {
  Captured r = run({"image", "build", "app", ctx_.native(), "--quiet", "--json"});
  ASSERT_TRUE(r.result) << r.result.error().message();
  EXPECT_EQ(*r.result, 0);
  EXPECT_EQ(r.err.find("cc -o app"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Step 2/2 : RUN make\n ---> done in 1.5s\n"), std::string::npos) << r.err;
  // stdout: every event, one a line, the last with the image.
  std::vector<nlohmann::json> events;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(events.size(), 8u) << r.out;
  EXPECT_EQ(events[0]["type"], "warning");
  EXPECT_EQ(events[4]["type"], "output");
  EXPECT_EQ(events[4]["data"], "cc -o app\r\n50%\r100%");
  EXPECT_EQ(events[7]["type"], "done");
  EXPECT_EQ(events[7]["image"]["name"], "app");
  EXPECT_EQ(events[7]["image"]["format"], "dockerfile");
  // A failure's "error" event is the last line.
  svc_.failure = Error(Code::kConflict, "step 2 (RUN make) exited with code 2");
  r = run({"image", "build", "app", ctx_.native(), "--json"});
  ASSERT_FALSE(r.result);
  auto last = nlohmann::json::parse(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1));
  EXPECT_EQ(last["type"], "error");
  EXPECT_EQ(last["error"]["code"], "conflict");
}

TEST_F(ImageBuildCommand, ADockerfileOutsideTheContextIsSentAlong) {
  std::ofstream(dir_ / "build.Dockerfile") << "FROM host\nENV OUTSIDE=1\n";
  Captured r =
      run({"image", "build", "app", "-f", (dir_ / "build.Dockerfile").native(), ctx_.native()});
  ASSERT_TRUE(r.result) << r.result.error().message();
  const std::string& name = svc_.last.dockerfile;
  ASSERT_TRUE(name.starts_with(".dockerfile.")) << name;
  EXPECT_EQ(name.size(), std::string(".dockerfile.").size() + 16);
  auto entries = tar_entries(svc_.context);
  EXPECT_EQ(entries[name], "FROM host\nENV OUTSIDE=1\n");
  EXPECT_TRUE(entries.contains("Dockerfile"));  // the context's own, an ordinary file now

  // One in a subdirectory of the context is named by its path there.
  fs::create_directories(ctx_ / "docker");
  std::ofstream(ctx_ / "docker" / "Dockerfile.dev") << "FROM host\n";
  svc_.context.clear();
  r = run({"image", "build", "app", "-f", (ctx_ / "docker" / "Dockerfile.dev").native(),
           ctx_.native()});
  ASSERT_TRUE(r.result) << r.result.error().message();
  EXPECT_EQ(svc_.last.dockerfile, "docker/Dockerfile.dev");
}

TEST_F(ImageBuildCommand, AFailedBuildIsAnErrorNamingTheStep) {
  svc_.failure = Error(Code::kConflict, "step 2 (RUN make) exited with code 2");
  Captured r = run({"image", "build", "app", ctx_.native()});
  ASSERT_FALSE(r.result);
  EXPECT_EQ(r.result.error().message(), "building image app: step 2 (RUN make) exited with code 2");
  EXPECT_NE(r.err.find("Step 2/2 : RUN make"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("space: built image"), std::string::npos) << r.err;
}

TEST_F(ImageBuildCommand, RefusesBeforeSending) {
  Captured r = run({"image", "build", "app", (dir_ / "nothing").native()});
  ASSERT_FALSE(r.result);
  EXPECT_NE(r.result.error().message().find("is not a directory"), std::string::npos);
  fs::remove(ctx_ / "Dockerfile");
  r = run({"image", "build", "app", ctx_.native()});
  ASSERT_FALSE(r.result);
  EXPECT_NE(r.result.error().message().find("no Dockerfile at"), std::string::npos);
  std::ofstream(ctx_ / "Dockerfile") << "FROM host\n";
  std::ofstream(ctx_ / ".dockerignore") << "[oops\n";
  r = run({"image", "build", "app", ctx_.native()});
  ASSERT_FALSE(r.result);
  EXPECT_NE(r.result.error().message().find(".dockerignore line 1"), std::string::npos);
  EXPECT_TRUE(svc_.context.empty()) << "nothing was sent";
}

}  // namespace
}  // namespace space::cli

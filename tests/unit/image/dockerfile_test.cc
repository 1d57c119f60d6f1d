// parse_dockerfile(): every supported instruction and form, continuations, escapes and parser
// directives, variable substitution and ARG scoping, the base image's config as the starting
// state, and each refused or ignored instruction with its message; plus the bounds on size,
// instruction count and JSON nesting.
#include "image/dockerfile.h"

#include <gtest/gtest.h>

#include <string>

namespace space::image {
namespace {

using Kind = Step::Kind;
using Args = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;
using Pairs = std::vector<std::pair<std::string, std::string>>;

struct Base {
  ImageConfig config;
  std::vector<std::string> asked;  // the names base_config was called with
};

Result<Dockerfile> parse(std::string_view text, Base& base, const Args& args = {},
                         const DockerfileLimits& limits = {}) {
  return parse_dockerfile(
      text, args,
      [&](const std::string& from) -> Result<ImageConfig> {
        base.asked.push_back(from);
        return base.config;
      },
      limits);
}

Result<Dockerfile> parse(std::string_view text, const Args& args = {},
                         const DockerfileLimits& limits = {}) {
  Base base;
  return parse(text, base, args, limits);
}

// The error message of a parse that must fail ("" when it succeeded).
std::string error_of(std::string_view text, const Args& args = {},
                     const DockerfileLimits& limits = {}) {
  auto r = parse(text, args, limits);
  EXPECT_FALSE(r.has_value()) << text;
  if (r) return "";
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  return r.error().message();
}

#define EXPECT_HAS(haystack, needle)                    \
  EXPECT_NE((haystack).find(needle), std::string::npos) \
      << "\"" << (haystack) << "\" lacks \"" << (needle) << "\""

const Strings kSh = {"/bin/sh", "-c"};

Strings sh(std::string cmd) {
  Strings argv = kSh;
  argv.push_back(std::move(cmd));
  return argv;
}

// --- the typical file ------------------------------------------------------------------------

TEST(DockerfileTest, TypicalAgentDockerfile) {
  Base base;
  base.config.env = {"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"};
  base.config.cmd = {"python3"};
  auto r = parse(R"(# an agent's environment
FROM python:3.12-slim
ENV PIP_NO_CACHE_DIR=1 \
    APP_HOME=/app
WORKDIR $APP_HOME
COPY requirements.txt .
RUN pip install -r requirements.txt && \
    rm -rf /root/.cache
COPY --chown=agent:agent src/ ./src/
USER agent
LABEL org.opencontainers.image.title="agent env" version=1
ENTRYPOINT ["python3", "-m", "agent"]
CMD ["--serve"]
)",
                 base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(base.asked, Strings{"python:3.12-slim"});
  EXPECT_EQ(r->from, "python:3.12-slim");
  EXPECT_TRUE(r->warnings.empty());
  ASSERT_EQ(r->steps.size(), 9u);

  const Step& env = r->steps[0];
  EXPECT_EQ(env.kind, Kind::kEnv);
  EXPECT_EQ(env.line, 3u);
  EXPECT_EQ(env.pairs, (Pairs{{"PIP_NO_CACHE_DIR", "1"}, {"APP_HOME", "/app"}}));
  EXPECT_EQ(env.context.env, base.config.env);  // the state before the step
  EXPECT_EQ(env.context.workdir, "/");

  EXPECT_EQ(r->steps[1].kind, Kind::kWorkdir);
  EXPECT_EQ(r->steps[1].value, "/app");

  const Step& copy = r->steps[2];
  EXPECT_EQ(copy.kind, Kind::kCopy);
  EXPECT_EQ(copy.sources, Strings{"requirements.txt"});
  EXPECT_EQ(copy.dest, "/app/");
  EXPECT_EQ(copy.context.workdir, "/app");
  EXPECT_EQ(copy.context.env, (Strings{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8",
                                       "PIP_NO_CACHE_DIR=1", "APP_HOME=/app"}));

  const Step& run = r->steps[3];
  EXPECT_EQ(run.kind, Kind::kRun);
  EXPECT_EQ(run.line, 7u);
  EXPECT_EQ(run.argv, sh("pip install -r requirements.txt &&     rm -rf /root/.cache"));
  EXPECT_EQ(run.text, "RUN pip install -r requirements.txt &&     rm -rf /root/.cache");

  EXPECT_EQ(r->steps[4].chown, "agent:agent");
  EXPECT_EQ(r->steps[4].sources, Strings{"src/"});
  EXPECT_EQ(r->steps[4].dest, "/app/src/");
  EXPECT_EQ(r->steps[5].kind, Kind::kUser);
  EXPECT_EQ(r->steps[5].value, "agent");
  EXPECT_EQ(r->steps[6].kind, Kind::kLabel);
  EXPECT_EQ(r->steps[6].context.user, "agent");
  EXPECT_EQ(r->steps[7].kind, Kind::kEntrypoint);
  EXPECT_EQ(r->steps[8].kind, Kind::kCmd);

  const ImageConfig& c = r->config;
  EXPECT_EQ(c.env, (Strings{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8", "PIP_NO_CACHE_DIR=1",
                            "APP_HOME=/app"}));
  EXPECT_EQ(c.working_dir, "/app");
  EXPECT_EQ(c.user, "agent");
  EXPECT_EQ(c.entrypoint, (Strings{"python3", "-m", "agent"}));
  EXPECT_EQ(c.cmd, Strings{"--serve"});
  EXPECT_EQ(c.labels, (std::map<std::string, std::string>{
                          {"org.opencontainers.image.title", "agent env"}, {"version", "1"}}));
}

TEST(DockerfileTest, BaseConfigStartsTheStateAndItsErrorIsPassedOn) {
  Base base;
  base.config.env = {"PATH=/bin", "HOME=/root"};
  base.config.working_dir = "/srv";
  base.config.user = "app";
  base.config.entrypoint = {"/entry"};
  base.config.cmd = {"serve"};
  base.config.labels = {{"a", "1"}};
  auto r = parse("FROM base\nRUN true\nLABEL b=2\n", base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].context.env, base.config.env);
  EXPECT_EQ(r->steps[0].context.workdir, "/srv");
  EXPECT_EQ(r->steps[0].context.user, "app");
  EXPECT_EQ(r->config.entrypoint, Strings{"/entry"});
  EXPECT_EQ(r->config.cmd, Strings{"serve"});
  EXPECT_EQ(r->config.working_dir, "/srv");
  EXPECT_EQ(r->config.labels, (std::map<std::string, std::string>{{"a", "1"}, {"b", "2"}}));

  auto missing = parse_dockerfile("FROM nope\nRUN true\n", {}, [](const std::string& from) {
    return Result<ImageConfig>(fail(Code::kNotFound, "no image " + from));
  });
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  EXPECT_EQ(missing.error().message(), "no image nope");
}

// --- lines, continuations, comments, directives --------------------------------------------

TEST(DockerfileTest, ContinuationsCommentsAndBlankLines) {
  auto r = parse(
      "\n  # leading comment\nfrom img\n\nrun echo a \\\n# a comment inside\n   b \\  \n\n  c\n"
      "RUN echo '# not a comment' # nor this\n");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].line, 5u);
  // Docker joins the lines as they are (the escape char and the blanks after it dropped),
  // leaves comment lines out and skips the empty continuation line, with a warning.
  EXPECT_EQ(r->steps[0].argv, sh("echo a    b   c"));
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_HAS(r->warnings[0], "line 5");
  EXPECT_HAS(r->warnings[0], "empty continuation line");
  EXPECT_EQ(r->steps[1].argv, sh("echo '# not a comment' # nor this"));
  EXPECT_EQ(r->steps[1].line, 10u);
}

TEST(DockerfileTest, CrlfBomAndContinuationAtEnd) {
  auto r = parse(
      "\xEF\xBB\xBF"
      "FROM img\r\nRUN a \\\r\n  b\r\nRUN last \\");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].argv, sh("a   b"));
  EXPECT_EQ(r->steps[1].argv, sh("last"));
}

TEST(DockerfileTest, InstructionsAreCaseInsensitive) {
  auto r = parse("From img\nrUn true\nWorkDir /x\nenv A=1\ncmd [\"a\"]\n");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 4u);
  EXPECT_EQ(r->steps[1].value, "/x");
}

TEST(DockerfileTest, EscapeDirectiveBacktick) {
  auto r = parse(
      "# syntax=docker/dockerfile:1\n# escape=`\nFROM img\n"
      "RUN dir C:\\ `\n  && echo hi\nENV P=C:\\path A=x`$y\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].argv, sh("dir C:\\   && echo hi"));
  EXPECT_EQ(r->steps[1].pairs, (Pairs{{"P", "C:\\path"}, {"A", "x$y"}}));
}

TEST(DockerfileTest, DirectivesOnlyAtTheTop) {
  // After an instruction (or a blank line, or a plain comment) `# escape=` is a comment.
  auto r = parse("FROM img\n# escape=`\nRUN a \\\n b\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].argv, sh("a  b"));
  auto r2 = parse("\n# escape=`\nFROM img\nRUN a \\\n b\n");
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ(r2->steps[0].argv, sh("a  b"));
  auto r3 = parse("# hello\n# escape=`\nFROM img\nRUN a `\nRUN b\n");
  ASSERT_TRUE(r3) << r3.error().message();
  ASSERT_EQ(r3->steps.size(), 2u);  // ` is no escape char here
  EXPECT_EQ(r3->steps[0].argv, sh("a `"));
}

TEST(DockerfileTest, DirectiveErrors) {
  EXPECT_HAS(error_of("# escape=x\nFROM img\n"), "line 1: the escape directive must be \\ or `");
  EXPECT_HAS(error_of("# escape=`\n# escape=\\\nFROM img\n"),
             "line 2: only one escape parser directive");
}

// --- RUN, CMD, ENTRYPOINT, SHELL -----------------------------------------------------------

TEST(DockerfileTest, RunExecAndShellForms) {
  auto r = parse(
      "FROM img\nRUN [\"/bin/echo\", \"a b\", \"$HOME\"]\nRUN [not json\nRUN [ -f /x ] && echo\n"
      "SHELL [\"/bin/bash\", \"-eo\", \"pipefail\", \"-c\"]\nRUN echo $HOME | cat\n");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 4u);
  EXPECT_EQ(r->steps[0].argv, (Strings{"/bin/echo", "a b", "$HOME"}));  // never substituted
  EXPECT_EQ(r->steps[1].argv, sh("[not json"));  // not JSON: the shell form, as Docker
  EXPECT_EQ(r->steps[2].argv, sh("[ -f /x ] && echo"));
  EXPECT_EQ(r->steps[3].argv, (Strings{"/bin/bash", "-eo", "pipefail", "-c", "echo $HOME | cat"}));
}

TEST(DockerfileTest, CmdAndEntrypointForms) {
  Base base;
  base.config.cmd = {"base-cmd"};
  auto r = parse("FROM img\nSHELL [\"/bin/bash\", \"-c\"]\nCMD echo hi\n", base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->config.cmd, (Strings{"/bin/bash", "-c", "echo hi"}));
  EXPECT_EQ(r->steps[0].argv, r->config.cmd);

  // ENTRYPOINT resets the CMD inherited from the base image...
  auto e = parse("FROM img\nENTRYPOINT [\"/app\"]\n", base);
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->config.entrypoint, Strings{"/app"});
  EXPECT_TRUE(e->config.cmd.empty());
  // ...but not one this Dockerfile set before it.
  auto k = parse("FROM img\nCMD [\"x\"]\nENTRYPOINT /app run\n", base);
  ASSERT_TRUE(k) << k.error().message();
  EXPECT_EQ(k->config.cmd, Strings{"x"});
  EXPECT_EQ(k->config.entrypoint, sh("/app run"));
  // An empty JSON array clears.
  base.config.entrypoint = {"/old"};
  auto c = parse("FROM img\nCMD []\nENTRYPOINT []\n", base);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_TRUE(c->config.cmd.empty());
  EXPECT_TRUE(c->config.entrypoint.empty());
  EXPECT_EQ(c->steps[0].kind, Kind::kCmd);
  EXPECT_TRUE(c->steps[0].argv.empty());
}

TEST(DockerfileTest, JsonFormsWithNonStringsAreRefused) {
  for (std::string_view ins : {"RUN", "CMD", "ENTRYPOINT", "SHELL"}) {
    std::string e = error_of("FROM img\n" + std::string(ins) + " [\"a\", 1]\n");
    EXPECT_HAS(e, "line 2: " + std::string(ins) + ": the JSON form must be an array of strings");
  }
  EXPECT_HAS(error_of("FROM img\nCOPY [\"a\", [\"b\"]]\n"), "array of strings");
  EXPECT_HAS(error_of("FROM img\nRUN [\"a\\u0000b\"]\n"), "NUL");
  EXPECT_HAS(error_of("FROM img\nSHELL /bin/bash -c\n"), "SHELL takes the JSON form");
  EXPECT_HAS(error_of("FROM img\nSHELL []\n"), "SHELL takes the JSON form");
  EXPECT_HAS(error_of("FROM img\nRUN []\n"), "RUN needs a command");
  EXPECT_HAS(error_of("FROM img\nRUN\n"), "line 2: RUN needs a command");
  EXPECT_HAS(error_of("FROM img\nCMD\n"), "CMD needs a command");
}

TEST(DockerfileTest, DeepJsonIsRefused) {
  std::string deep = std::string(10000, '[') + std::string(10000, ']');
  EXPECT_HAS(error_of("FROM img\nCMD " + deep + "\n"), "nested too deep");
}

TEST(DockerfileTest, RunFlagsAndHeredocsAreRefused) {
  EXPECT_HAS(error_of("FROM img\nRUN --mount=type=cache,target=/root/.cache pip install x\n"),
             "line 2: RUN --mount is not supported");
  EXPECT_HAS(error_of("FROM img\nRUN --network=none make\n"), "RUN --network is not supported");
  EXPECT_HAS(error_of("FROM img\nRUN --security=insecure make\n"),
             "RUN --security is not supported");
  EXPECT_HAS(error_of("FROM img\nRUN --bogus make\n"), "RUN: unknown flag --bogus");
  EXPECT_HAS(error_of("FROM img\nRUN <<EOF\necho hi\nEOF\n"), "line 2: RUN: heredocs (<<EOF)");
  EXPECT_HAS(error_of("FROM img\nRUN cat 2<<-'END' > /x\n"), "heredocs");
  EXPECT_HAS(error_of("FROM img\nCOPY <<EOF /x\n"), "heredocs");
  // Not heredocs: a here-string, a quoted word, an attached redirection.
  auto r = parse("FROM img\nRUN cat <<< hi\nRUN echo \"<<EOF\"\nRUN cat<<EOF\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps.size(), 3u);
}

// --- COPY and ADD ------------------------------------------------------------------------

TEST(DockerfileTest, CopyForms) {
  auto r = parse(
      "FROM img\nWORKDIR /w\nCOPY a b dir/\nCOPY --chmod=0755 --link run.sh /usr/local/bin/run\n"
      "COPY [\"with space\", \"./x/../y/\"]\nCOPY . .\nARG OWNER=1000\n"
      "COPY --chown=${OWNER}:${OWNER} --chmod=644 f* /etc/../abs\nADD local.txt /t/\n"
      "COPY -- --odd /\n");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 8u);
  EXPECT_EQ(r->steps[1].sources, (Strings{"a", "b"}));
  EXPECT_EQ(r->steps[1].dest, "/w/dir/");
  EXPECT_FALSE(r->steps[1].chmod);
  EXPECT_EQ(r->steps[2].chmod, 0755u);
  EXPECT_EQ(r->steps[2].dest, "/usr/local/bin/run");
  EXPECT_EQ(r->steps[3].sources, Strings{"with space"});
  EXPECT_EQ(r->steps[3].dest, "/w/y/");
  EXPECT_EQ(r->steps[4].sources, Strings{"."});
  EXPECT_EQ(r->steps[4].dest, "/w/");
  EXPECT_EQ(r->steps[5].chown, "1000:1000");
  EXPECT_EQ(r->steps[5].chmod, 0644u);
  EXPECT_EQ(r->steps[5].sources, Strings{"f*"});
  EXPECT_EQ(r->steps[5].dest, "/abs");
  EXPECT_EQ(r->steps[5].context.args, Strings{"OWNER=1000"});
  EXPECT_EQ(r->steps[6].kind, Kind::kCopy);  // ADD of a local file is a copy
  EXPECT_EQ(r->steps[6].sources, Strings{"local.txt"});
  EXPECT_EQ(r->steps[6].dest, "/t/");
  EXPECT_EQ(r->steps.back().sources, Strings{"--odd"});  // "--" ends the flags
}

TEST(DockerfileTest, CopyRefusals) {
  EXPECT_HAS(error_of("FROM img\nCOPY --from=builder /out /out\n"),
             "line 2: COPY --from is a multi-stage build, which is not supported");
  EXPECT_HAS(error_of("FROM img\nCOPY only\n"), "COPY needs a source and a destination");
  EXPECT_HAS(error_of("FROM img\nCOPY a b /dest\n"),
             "COPY of several sources needs a destination directory ending in '/'");
  EXPECT_HAS(error_of("FROM img\nCOPY --chmod=u+x a /b\n"), "give the mode in octal");
  EXPECT_HAS(error_of("FROM img\nCOPY --chmod=17777 a /b\n"), "give the mode in octal");
  EXPECT_HAS(error_of("FROM img\nCOPY --chmod a /b\n"), "--chmod needs a value");
  EXPECT_HAS(error_of("FROM img\nCOPY --exclude=*.md . /\n"), "unsupported flag --exclude");
  EXPECT_HAS(error_of("FROM img\nCOPY --link --link a /b\n"), "--link is repeated");
  EXPECT_HAS(error_of("FROM img\nCOPY https://example.com/x /x\n"),
             "COPY of a URL is not supported");
  EXPECT_HAS(error_of("FROM img\nCOPY $NOPE /x\n"), "a source is empty after substitution");
}

TEST(DockerfileTest, AddOfUrlsGitAndArchivesIsRefused) {
  const std::string url_msg =
      "ADD of a URL is not supported: download it in a RUN step through the build profile's "
      "egress";
  for (std::string src : {"http://example.com/f", "HTTPS://example.com/f.tar.gz",
                          "git@github.com:o/r.git", "git://host/r", "https://github.com/o/r.git"})
    EXPECT_HAS(error_of("FROM img\nADD " + src + " /x\n"), "line 2: " + url_msg);
  for (std::string src :
       {"a.tar", "a.tar.gz", "A.TGZ", "a.tar.xz", "a.tar.bz2", "a.tar.zst", "dir/x.tar"}) {
    std::string e = error_of("FROM img\nADD " + src + " /x/\n");
    EXPECT_HAS(e, "line 2: ADD of the archive " + src);
    EXPECT_HAS(e, "COPY it and unpack it in a RUN step");
    EXPECT_HAS(e, "RUN tar -xf");
  }
  // COPY of the same archive copies it as it is: that is Docker's COPY too.
  auto r = parse("FROM img\nCOPY a.tar.gz /x/\nADD notes.gz /x/\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps.size(), 2u);
  EXPECT_HAS(error_of("FROM img\nADD --checksum=sha256:00 f /x\n"), "ADD --checksum");
}

// --- ENV, LABEL, WORKDIR, USER ---------------------------------------------------------------

TEST(DockerfileTest, EnvFormsReplaceInPlaceAndSeeTheOldValues) {
  Base base;
  base.config.env = {"PATH=/bin", "A=base"};
  auto r = parse(
      "FROM img\nENV A=one B=\"two words\" C='$A' D=\"$A\" E=x\\ y\nENV PATH /usr/bin:$PATH\n"
      "ENV F=${B}!\nENV legacy   value with  spaces\nENV A=$A-again\n",
      base);
  ASSERT_TRUE(r) << r.error().message();
  // D sees A's value from before this ENV instruction, as Docker.
  EXPECT_EQ(r->steps[0].pairs,
            (Pairs{{"A", "one"}, {"B", "two words"}, {"C", "$A"}, {"D", "base"}, {"E", "x y"}}));
  EXPECT_EQ(r->steps[1].pairs, (Pairs{{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(r->steps[2].pairs, (Pairs{{"F", "two words!"}}));
  EXPECT_EQ(r->steps[3].pairs, (Pairs{{"legacy", "value with  spaces"}}));
  EXPECT_EQ(r->config.env,
            (Strings{"PATH=/usr/bin:/bin", "A=one-again", "B=two words", "C=$A", "D=base", "E=x y",
                     "F=two words!", "legacy=value with  spaces"}));
  EXPECT_EQ(r->steps[4].context.env[1], "A=one");
}

TEST(DockerfileTest, EnvAndLabelErrors) {
  EXPECT_HAS(error_of("FROM img\nENV ALONE\n"), "line 2: ENV ALONE has no value");
  EXPECT_HAS(error_of("FROM img\nENV A=1 B\n"), "no '=' in \"B\"");
  EXPECT_HAS(error_of("FROM img\nENV =x\n"), "a name is empty");
  EXPECT_HAS(error_of("FROM img\nENV A=\"open\n"), "double quote is not closed");
  EXPECT_HAS(error_of("FROM img\nENV A='open\n"), "single quote is not closed");
  EXPECT_HAS(error_of("FROM img\nLABEL\n"), "LABEL needs NAME=VALUE");
  EXPECT_HAS(error_of("FROM img\nENV --x=1 A=1\n"), "ENV takes no flags");
}

TEST(DockerfileTest, LabelForms) {
  Base base;
  base.config.labels = {{"keep", "k"}, {"over", "old"}};
  auto r = parse(
      "FROM img\nARG V=3\nLABEL \"com.example.vendor\"=\"ACME Inc\" over=new ver=$V\n"
      "LABEL description=\"multi \\\nline\"\nLABEL legacy form value\n",
      base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].pairs,
            (Pairs{{"com.example.vendor", "ACME Inc"}, {"over", "new"}, {"ver", "3"}}));
  EXPECT_EQ(r->config.labels,
            (std::map<std::string, std::string>{{"keep", "k"},
                                                {"over", "new"},
                                                {"com.example.vendor", "ACME Inc"},
                                                {"ver", "3"},
                                                {"description", "multi line"},
                                                {"legacy", "form value"}}));
}

TEST(DockerfileTest, WorkdirIsRelativeToThePreviousOne) {
  Base base;
  base.config.working_dir = "/base";
  auto r = parse(
      "FROM img\nWORKDIR rel\nWORKDIR ../other/./x/\nWORKDIR /abs\nWORKDIR ../../..\n"
      "ENV D=deep\nWORKDIR /$D\nCOPY f sub\n",
      base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].value, "/base/rel");
  EXPECT_EQ(r->steps[1].value, "/base/other/x");
  EXPECT_EQ(r->steps[2].value, "/abs");
  EXPECT_EQ(r->steps[3].value, "/");
  EXPECT_EQ(r->steps[5].value, "/deep");
  EXPECT_EQ(r->steps[6].dest, "/deep/sub");
  EXPECT_EQ(r->config.working_dir, "/deep");
  EXPECT_HAS(error_of("FROM img\nWORKDIR\n"), "WORKDIR needs a path");
  EXPECT_HAS(error_of("FROM img\nWORKDIR $NOPE\n"), "the path is empty after substitution");
}

TEST(DockerfileTest, User) {
  auto r = parse("FROM img\nARG UID=1000\nUSER ${UID}:${GID:-100}\nRUN id\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[0].value, "1000:100");
  EXPECT_EQ(r->steps[1].context.user, "1000:100");
  EXPECT_EQ(r->config.user, "1000:100");
  EXPECT_HAS(error_of("FROM img\nUSER\n"), "USER needs a user");
}

// --- substitution ----------------------------------------------------------------------------

TEST(DockerfileTest, SubstitutionForms) {
  auto r = parse(
      "FROM img\nENV SET=v EMPTY=\nENV "
      "a=${SET:-x} b=${EMPTY:-x} c=${UNSET:-x} d=${SET:+y} e=${EMPTY:+y} f=${UNSET:+y} "
      "g=${EMPTY-x} h=${UNSET-x} i=${EMPTY+y} j=\\$SET k='${SET}' l=\"\\$SET\" m=$SET$SET "
      "n=${UNSET:-${SET:-z}} o=$ p=a$-b q=${SET}x r=$UNSET s=\"${UNSET:-two words}\"\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->steps[1].pairs, (Pairs{{"a", "v"},
                                      {"b", "x"},
                                      {"c", "x"},
                                      {"d", "y"},
                                      {"e", ""},
                                      {"f", ""},
                                      {"g", ""},
                                      {"h", "x"},
                                      {"i", "y"},
                                      {"j", "$SET"},
                                      {"k", "${SET}"},
                                      {"l", "$SET"},
                                      {"m", "vv"},
                                      {"n", "v"},
                                      {"o", "$"},
                                      {"p", "ab"},
                                      {"q", "vx"},
                                      {"r", ""},
                                      {"s", "two words"}}));
}

TEST(DockerfileTest, SubstitutionErrors) {
  EXPECT_HAS(error_of("FROM img\nENV A=\"${UNSET:?must be set}\"\n"),
             "line 2: ENV: A: UNSET: must be set");
  EXPECT_HAS(error_of("FROM img\nENV A=${B\n"), "missing '}'");
  EXPECT_HAS(error_of("FROM img\nENV A=${B:-x\n"), "missing '}'");
  EXPECT_HAS(error_of("FROM img\nENV A=${}\n"), "bad substitution");
  EXPECT_HAS(error_of("FROM img\nENV A=${B#x}\n"), "unsupported modifier (#)");
  std::string nest;
  for (int i = 0; i < 40; ++i) nest += "${X:-";
  nest += "x" + std::string(40, '}');
  EXPECT_HAS(error_of("FROM img\nENV A=" + nest + "\n"), "nested more than 16 deep");
}

TEST(DockerfileTest, SubstitutionOutputIsBounded) {
  // Each $A doubles nothing by itself, but 20,000 of them would be 1.3 GB.
  std::string big(60000, 'x');
  std::string refs;
  for (int i = 0; i < 20000; ++i) refs += "$A";
  std::string e = error_of("FROM img\nENV A=" + big + "\nENV B=" + refs + "\n");
  EXPECT_HAS(e, "line 3: ENV: B: longer than 65536 bytes after substitution");
}

// --- ARG -------------------------------------------------------------------------------------

TEST(DockerfileTest, ArgsBeforeFromAreForFromOnly) {
  Base base;
  auto r = parse(
      "ARG TAG=3.12\nARG IMG=python\nFROM ${IMG}:${TAG}-slim\nENV A=[$TAG]\nARG TAG\n"
      "ENV B=[$TAG] C=[$IMG]\n",
      base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(base.asked, Strings{"python:3.12-slim"});
  EXPECT_EQ(r->from, "python:3.12-slim");
  EXPECT_EQ(r->steps[0].pairs, (Pairs{{"A", "[]"}}));  // not redeclared yet
  // Redeclared without a value after FROM: it gets the value from before FROM.
  EXPECT_EQ(r->steps[1].pairs, (Pairs{{"B", "[3.12]"}, {"C", "[]"}}));
  EXPECT_EQ(r->steps[1].context.args, Strings{"TAG=3.12"});

  Base b2;
  auto w = parse("ARG TAG=1\nFROM img:$TAG\n", b2, {{"TAG", "2"}});
  ASSERT_TRUE(w) << w.error().message();
  EXPECT_EQ(w->from, "img:2");  // --build-arg wins
  EXPECT_TRUE(w->warnings.empty());
}

TEST(DockerfileTest, ArgsAfterFrom) {
  auto r = parse(
      "FROM img\nARG A=default B C=$A-c\nRUN step1\nENV A=env\nRUN step2\nARG D=${A}\n"
      "ARG A=again\nRUN step3\n",
      {{"B", "from-cli"}, {"C", "$literal"}, {"UNUSED", "x"}, {"ALSO", "y"}});
  ASSERT_TRUE(r) << r.error().message();
  // RUN sees the ARGs in scope as environment; a --build-arg wins and is taken as is.
  EXPECT_EQ(r->steps[0].context.args, (Strings{"A=default", "B=from-cli", "C=$literal"}));
  // An ENV of the same name shadows the ARG, in substitution and in RUN's environment.
  EXPECT_EQ(r->steps[2].context.args, (Strings{"B=from-cli", "C=$literal"}));
  EXPECT_EQ(r->steps[2].context.env, Strings{"A=env"});
  EXPECT_EQ(r->steps[3].context.args, (Strings{"B=from-cli", "C=$literal", "D=env"}));
  ASSERT_EQ(r->warnings.size(), 2u);
  EXPECT_EQ(r->warnings[0], "build-arg ALSO was not used: the Dockerfile declares no ARG ALSO");
  EXPECT_EQ(r->warnings[1], "build-arg UNUSED was not used: the Dockerfile declares no ARG UNUSED");
  // An ARG without a value and no --build-arg is declared but not set.
  auto u = parse("FROM img\nARG X\nENV Y=${X-unset}\nRUN true\n");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->steps[0].pairs, (Pairs{{"Y", "unset"}}));
  EXPECT_TRUE(u->steps[1].context.args.empty());
  EXPECT_HAS(error_of("FROM img\nARG\n"), "ARG needs a NAME");
}

TEST(DockerfileTest, PlatformArgs) {
  Platform host = Platform::host();
  Base base;
  auto r = parse(
      "FROM --platform=$BUILDPLATFORM img-$TARGETARCH\nARG TARGETARCH\n"
      "RUN echo $TARGETARCH\n",
      base);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(base.asked, Strings{"img-" + host.architecture});
  EXPECT_EQ(r->steps[0].context.args, Strings{"TARGETARCH=" + host.architecture});
  std::string other = host.architecture == "s390x" ? "linux/amd64" : "linux/s390x";
  EXPECT_HAS(error_of("FROM --platform=" + other + " img\n"),
             "line 1: FROM --platform=" + other + ": SPACE builds for this host's platform");
}

// --- FROM and the instructions SPACE refuses or ignores ------------------------------------

TEST(DockerfileTest, FromRules) {
  EXPECT_HAS(error_of("RUN true\nFROM img\n"), "line 1: RUN comes before FROM");
  EXPECT_HAS(error_of("# only a comment\n\n"), "no FROM instruction");
  EXPECT_HAS(error_of("ARG X=1\n"), "no FROM instruction");
  EXPECT_HAS(error_of("FROM img AS build\n"),
             "line 1: FROM ... AS build names a build stage, and multi-stage builds are not "
             "supported");
  EXPECT_HAS(error_of("FROM a\nRUN x\nFROM b\n"),
             "line 3: a second FROM starts a multi-stage build");
  EXPECT_HAS(error_of("FROM a b\n"), "FROM takes one image name");
  EXPECT_HAS(error_of("FROM $NOPE\n"), "the image name is empty after substitution");
  EXPECT_HAS(error_of("FROM\n"), "FROM takes one image name");
  EXPECT_HAS(error_of("FROM --bogus img\n"), "FROM: unknown flag --bogus");
}

TEST(DockerfileTest, RefusedInstructions) {
  EXPECT_HAS(error_of("FROM img\nONBUILD RUN make\n"), "line 2: ONBUILD is not supported");
  EXPECT_HAS(error_of("FROM img\nFROBNICATE x\n"), "line 2: unknown instruction FROBNICATE");
}

TEST(DockerfileTest, IgnoredInstructionsWarn) {
  auto r = parse(
      "FROM img\nEXPOSE 8080\nVOLUME /data\nSTOPSIGNAL SIGTERM\n"
      "HEALTHCHECK --interval=5s CMD curl -f localhost\nMAINTAINER me\nRUN true\n");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->steps.size(), 1u);
  ASSERT_EQ(r->warnings.size(), 5u);
  EXPECT_HAS(r->warnings[0], "line 2: EXPOSE is ignored");
  EXPECT_HAS(r->warnings[1], "line 3: VOLUME is ignored");
  EXPECT_HAS(r->warnings[2], "line 4: STOPSIGNAL is ignored");
  EXPECT_HAS(r->warnings[3], "line 5: HEALTHCHECK is ignored");
  EXPECT_HAS(r->warnings[4], "line 6: MAINTAINER is ignored");
  EXPECT_HAS(r->warnings[4], "LABEL maintainer=");
}

// --- limits ----------------------------------------------------------------------------------

TEST(DockerfileTest, Limits) {
  DockerfileLimits small;
  small.max_bytes = 64;
  EXPECT_HAS(error_of("FROM img\n" + std::string(100, '#') + "\n", {}, small),
             "the Dockerfile is 110 bytes, more than the 64 allowed");

  std::string many = "FROM img\n";
  for (int i = 0; i < 1000; ++i) many += "RUN true\n";
  EXPECT_HAS(error_of(many), "line 1001: the Dockerfile has more than 1000 instructions");

  std::string huge = "FROM img\nRUN " + std::string(70000, 'x') + "\n";
  EXPECT_HAS(error_of(huge), "line 2: the instruction is longer than 65536 bytes");
  std::string joined = "FROM img\nRUN x";
  for (int i = 0; i < 100; ++i) joined += " \\\n" + std::string(1000, 'y');
  EXPECT_HAS(error_of(joined), "line 2: the instruction is longer than 65536 bytes");
  // A long comment is no instruction.
  EXPECT_TRUE(parse("FROM img\n# " + std::string(70000, 'c') + "\nRUN true\n"));

  EXPECT_HAS(error_of(std::string("FROM img\nRUN a\0b\n", 17)), "NUL byte");
  EXPECT_HAS(error_of("FROM img\nRUN true\nENV A=\xff\xfe\n"),
             "line 3: the Dockerfile is not valid UTF-8");

  // The environment and the plan stay bounded however the values multiply.
  std::string env = "FROM img\nENV A=" + std::string(60000, 'a') + "\n";
  for (int i = 0; i < 10; ++i) env += "ENV B" + std::to_string(i) + "=$A\n";
  EXPECT_HAS(error_of(env), "the environment grows past 262144 bytes");
  // One instruction cannot multiply a value either, nor ARGs before FROM.
  std::string one = "FROM img\nENV A=" + std::string(60000, 'a') + "\nENV";
  for (int i = 0; i < 10; ++i) one += " B" + std::to_string(i) + "=$A";
  EXPECT_HAS(error_of(one + "\n"), "line 3: ENV: the values grow past 262144 bytes");
  std::string meta = "ARG A=" + std::string(60000, 'a') + "\n";
  for (int i = 0; i < 10; ++i) meta += "ARG B" + std::to_string(i) + "=$A\n";
  EXPECT_HAS(error_of(meta + "FROM img\n"), "ARG: the ARGs before FROM grow past 262144 bytes");
  std::string vars = "FROM img\nENV";
  for (int i = 0; i < 5000; ++i) vars += " V" + std::to_string(i) + "=1";
  EXPECT_HAS(error_of(vars + "\n"), "line 2: ENV: more than 4096 variables");

  DockerfileLimits plan;
  plan.max_plan_bytes = 1 << 20;
  std::string steps = "FROM img\nENV A=" + std::string(60000, 'a') + "\n";
  for (int i = 0; i < 100; ++i) steps += "RUN true\n";
  EXPECT_HAS(error_of(steps, {}, plan), "the build plan grows past 1048576 bytes");
}

}  // namespace
}  // namespace space::image

// Reading a Dockerfile for `space image build` (docs/images.md, "Building from a Dockerfile"):
// the instructions an agent environment needs, turned into a plan the daemon's builder runs
// step by step. The text is untrusted (a user's, or an agent's), so the parser is bounded
// (bytes, lines, instructions, substitution output) and never throws; the fuzz target
// `dockerfile` runs it.
//
// Supported: FROM (one stage: an image SPACE has), RUN, COPY and ADD (files of the build
// context; ADD's URLs and archive unpacking are refused), ENV, ARG, WORKDIR, USER, ENTRYPOINT,
// CMD, LABEL, SHELL. Ignored with a warning (they describe how the image is run elsewhere, not
// what is in it): EXPOSE, VOLUME, STOPSIGNAL, HEALTHCHECK, MAINTAINER. Refused, with what to do
// instead: multi-stage builds (a second FROM, `FROM ... AS`, `COPY --from`), ONBUILD, heredocs
// (`<<EOF`), RUN --mount/--network/--security, ADD of a URL or git repository, unknown
// instructions. Parser directives `# syntax=` (ignored) and `# escape=` (\ or `) are read from
// the first lines. Line continuations, comments and blank lines are handled as Docker does.
//
// Variables: $VAR, ${VAR}, ${VAR:-word} and ${VAR:+word} (also ${VAR-word}, ${VAR+word} and
// ${VAR:?message}; quotes removed, \$ to escape) are substituted in
// FROM (pre-FROM ARGs only), COPY/ADD, ENV, ARG, WORKDIR, USER, LABEL, and in the exec forms of
// nothing (as Docker: ENTRYPOINT/CMD/RUN are left to the shell). Values come from ENV (the base
// image's Env first, then ENV instructions) and ARG (a --build-arg wins over the default).
// RUN commands also see the ARGs in scope as environment variables, as under Docker. A
// --build-arg value is taken as it is (not substituted). The platform ARGs (TARGETPLATFORM,
// TARGETOS, TARGETARCH, TARGETVARIANT and the BUILD* ones) hold this host's platform: usable in
// FROM, and after it once declared (`ARG TARGETARCH`). The text must be UTF-8 without NUL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "image/oci.h"

namespace space::image {

struct DockerfileLimits {
  size_t max_bytes = 1 << 20;         // the Dockerfile's size
  size_t max_instructions = 1000;     // instructions after continuations are joined
  size_t max_value_bytes = 64 << 10;  // one instruction's text, before or after substitution
  size_t max_env_bytes = 256 << 10;   // a step's Env plus ARGs, as "K=V" strings (also the ARGs
                                      // before FROM, and one instruction's substitution output)
  size_t max_plan_bytes = 16 << 20;   // all the steps together (each carries its context)
};

// The state of the image being built at a step: what its sandbox or its COPY sees.
struct StepContext {
  std::vector<std::string> env;   // "K=V": the base image's Env, then ENV instructions so far
  std::vector<std::string> args;  // "K=V": ARGs in scope with a value that no ENV of the same
                                  // name shadows (RUN's extra environment), in declared order
  std::string workdir = "/";      // absolute
  std::string user;               // "" = root
};

struct Step {
  enum class Kind { kRun, kCopy, kEnv, kWorkdir, kUser, kEntrypoint, kCmd, kLabel };
  Kind kind = Kind::kRun;
  size_t line = 0;      // 1-based line where the instruction starts
  std::string text;     // the instruction as written, continuations joined with a space (for
                        // progress lines and error messages; at most max_value_bytes)
  StepContext context;  // the state before this step
  // kRun: the command (shell form: the SHELL, default {"/bin/sh", "-c"}, plus the text);
  // kEntrypoint / kCmd: the new value (shell form: SHELL + text; an empty JSON array clears).
  std::vector<std::string> argv;
  // kCopy (COPY, and ADD of local files): sources relative to the context root as written
  // after substitution (may hold * ? [..] globs; "." is the whole context), dest absolute
  // (a relative one resolved against the workdir; a trailing '/' kept: "copy into"),
  // --chown as written after substitution ("" = root), --chmod (octal) if given.
  std::vector<std::string> sources;
  std::string dest;
  std::string chown;
  std::optional<uint32_t> chmod;
  // kEnv / kLabel: the pairs set, in order, after substitution.
  std::vector<std::pair<std::string, std::string>> pairs;
  // kWorkdir: the new absolute workdir (made in the tree, as Docker does); kUser: the user.
  std::string value;
};

struct Dockerfile {
  std::string from;  // the FROM image's name, after substitution of ARGs declared before it
  std::vector<Step> steps;
  ImageConfig config;  // the resulting image's config: the base's, changed by the steps
  std::vector<std::string> warnings;  // "line 7: EXPOSE is ignored (...)", unused --build-arg
};

// Parses `text`. `build_args` are --build-arg values (used only for ARGs the file declares).
// `base_config` is called once, with the FROM image's name, and returns that image's config
// (its Env, WorkingDir, User, Entrypoint, Cmd and Labels start the build's state); its error is
// passed on. Errors are kInvalidArgument "line N: ..." saying what is wrong and what to do.
Result<Dockerfile> parse_dockerfile(
    std::string_view text, const std::map<std::string, std::string>& build_args,
    const std::function<Result<ImageConfig>(const std::string& from)>& base_config,
    const DockerfileLimits& limits = {});

}  // namespace space::image

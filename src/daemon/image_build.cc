// `space image build`: an image from a Dockerfile (docs/images.md, "Building from a
// Dockerfile"). The build context is unpacked into a staging directory, the Dockerfile parsed
// (image/dockerfile.h), and each step run in order:
//  * RUN: a linux sandbox of the build profile on the previous step's tree (so its egress goes
//    through the gateway, with the profile's allowlist and the credentials the request grants
//    injected outside; nothing secret is ever written inside), the command executed with the
//    step's environment, workdir and user, its output streamed as progress; then the sandbox
//    is frozen, its overlay upper directory written as a tar layer (image::upper_layer) and the
//    sandbox destroyed;
//  * COPY/ADD: the sources written as a tar layer from the context (image::copy_layer);
//  * WORKDIR: the directory made in the tree if missing;
//  * ENV, ARG, USER, LABEL, ENTRYPOINT, CMD: the image's config only.
// A layer is applied (image::apply_layer, the importer's hardened code) onto a hard-link copy of
// the previous tree, and the new tree is kept as a build cache entry keyed by the SHA-256 of
// the previous key and everything the step depends on (for COPY the sources' content). An
// unchanged step is found in the cache and not run. The last tree becomes the image. Builds
// run one at a time.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/failpoint.h"
#include "common/openat2.h"
#include "common/units.h"
#include "daemon/daemon.h"
#include "image/dockerfile.h"
#include "image/layer_writer.h"
#include "image/sha256.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxDockerfileBytes = 1 << 20;
constexpr size_t kBuildCacheKeep = 256;  // step trees kept (least recently used dropped)

std::string key_hash(std::string_view s) { return image::sha256_digest(s).substr(7); }

// Reads a small file of a tree we do not trust, by a path resolved inside it.
Result<std::string> read_in_root(int root_fd, const std::string& rel, size_t max,
                                 const std::string& what) {
  int fd = sys_openat2(root_fd, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY,
                       RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) {
    if (errno == ENOENT)
      return fail(Code::kNotFound, what + " \"" + rel.substr(0, 200) + "\" not found");
    return fail_sys("open", what + " \"" + rel.substr(0, 200) + "\"");
  }
  UniqueFd g(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return fail_sys("stat", rel);
  if (!S_ISREG(st.st_mode))
    return fail(Code::kInvalidArgument, what + " \"" + rel.substr(0, 200) + "\" is not a file");
  if (static_cast<uint64_t>(st.st_size) > max)
    return fail(Code::kInvalidArgument,
                what + " \"" + rel.substr(0, 200) + "\" is larger than " + format_size(max));
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_sys("read", rel);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// COPY --chown's USER[:GROUP] as numbers: names looked up in the tree's /etc/passwd and
// /etc/group; a user without a group gets gid = uid, as Docker does.
Result<std::pair<uint32_t, uint32_t>> resolve_owner(int root_fd, const std::string& spec) {
  if (spec.empty()) return std::pair<uint32_t, uint32_t>{0, 0};
  auto colon = spec.find(':');
  std::string user = spec.substr(0, colon);
  std::string group = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto number = [](const std::string& s) -> std::optional<uint32_t> {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    uint64_t v = std::stoull(s);
    if (v > 0xfffffffeull) return std::nullopt;
    return static_cast<uint32_t>(v);
  };
  auto lookup = [&](const std::string& file, const std::string& name,
                    size_t field) -> Result<uint32_t> {
    if (auto n = number(name)) return *n;
    auto text = read_in_root(root_fd, file, 4 << 20, "the image's");
    if (text) {
      std::istringstream in(*text);
      std::string line;
      while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream ls(line);
        std::string part;
        while (std::getline(ls, part, ':')) f.push_back(part);
        if (f.size() > field && f[0] == name)
          if (auto n = number(f[field])) return *n;
      }
    }
    return fail(Code::kInvalidArgument,
                "--chown=" + spec.substr(0, 100) + ": no " +
                    (field == 2 && file == "etc/passwd" ? "user" : "group") + " \"" +
                    name.substr(0, 64) + "\" in the image's /" + file);
  };
  uint32_t uid = TRY(lookup("etc/passwd", user, 2));
  uint32_t gid = group.empty() ? uid : TRY(lookup("etc/group", group, 2));
  return std::pair{uid, gid};
}

// Whether the tree has a directory at `path` (absolute in the image), resolved inside it.
bool is_dir_in_root(int root_fd, const std::string& path) {
  std::string rel = path;
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  if (rel.empty()) return true;
  int fd = sys_openat2(root_fd, rel.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                       RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// WORKDIR: makes the missing directories of `path` (0755, root), resolved inside the tree.
Result<void> make_dirs_in_root(int root_fd, const std::string& path) {
  std::string so_far;
  std::stringstream in(path);
  std::string comp;
  while (std::getline(in, comp, '/')) {
    if (comp.empty() || comp == ".") continue;
    if (comp == "..")
      return fail(Code::kInvalidArgument, "WORKDIR " + path.substr(0, 200) + ": \"..\" in it");
    std::string parent = so_far.empty() ? "." : so_far;
    so_far += (so_far.empty() ? "" : "/") + comp;
    int dir = sys_openat2(root_fd, parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                          RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    if (dir < 0) return fail_sys("open", "WORKDIR " + path.substr(0, 200));
    UniqueFd g(dir);
    if (::mkdirat(dir, comp.c_str(), 0755) != 0 && errno != EEXIST)
      return fail_sys("mkdir", "WORKDIR " + path.substr(0, 200));
  }
  return {};
}

// Removes `rel` from a step's upper layer (frozen, about to be destroyed): a file, or a
// directory only if it is empty. The sandbox wrote this tree, so no symlink is followed on the
// way (RESOLVE_NO_SYMLINKS): a link it left cannot point the removal anywhere else.
void drop_in_upper(int upper_fd, const std::string& rel, bool dir) {
  auto slash = rel.rfind('/');
  std::string parent = slash == std::string::npos ? "." : rel.substr(0, slash);
  std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  int p = sys_openat2(upper_fd, parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (p < 0) return;
  UniqueFd g(p);
  ::unlinkat(p, name.c_str(), dir ? AT_REMOVEDIR : 0);
}

json context_json(const image::StepContext& c) {
  return {{"env", c.env}, {"args", c.args}, {"workdir", c.workdir}, {"user", c.user}};
}

}  // namespace

Result<ImageInfo> Daemon::build_image(const std::string& name, const BuildRequest& req,
                                      const ChunkSource& context,
                                      const std::function<void(const BuildEvent&)>& progress) {
  TRY_VOID(images_.check_build_target(name));
  std::string profile = req.profile;
  if (profile.empty()) profile = cfg_.profiles.count("build") ? "build" : "test";
  if (!cfg_.profiles.count(profile))
    return fail(
        Code::kInvalidArgument, "unknown profile \"" + profile.substr(0, 64) +
                                    "\" for the build's RUN steps; configured profiles: " + [&] {
                                      std::string s;
                                      for (auto& p : cfg_.profiles)
                                        s += (s.empty() ? "" : ", ") + p;
                                      return s;
                                    }());
  auto rt = runtimes_.find("linux");
  if (rt == runtimes_.end() || !rt->second->has_writable_layer())
    return fail(Code::kUnavailable,
                "image builds run their steps in the linux runtime, which this spaced does not "
                "have (`space doctor` says why)");
  const double step_timeout = req.step_timeout_s.value_or(kDefaultBuildStepTimeoutS);

  // The context, staged where sweep() finds it after a kill.
  std::random_device rd;
  fs::path staging = cfg_.state_dir / "images" / (".build-" + name + "-" + std::to_string(rd()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{staging};
  fs::path ctx_dir = staging / "context";
  TRY_VOID(images_.unpack_context(context, ctx_dir));
  UniqueFd ctx_fd(::open(ctx_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!ctx_fd) return fail_sys("open", ctx_dir.string());
  std::string text =
      TRY(read_in_root(ctx_fd.get(), req.dockerfile, kMaxDockerfileBytes, "the Dockerfile"));
  // A Dockerfile from outside the context comes as .dockerfile.<hex> (the CLI's): not context.
  if (fs::path(req.dockerfile).filename().string().starts_with(".dockerfile.") &&
      req.dockerfile.find('/') == std::string::npos)
    ::unlinkat(ctx_fd.get(), req.dockerfile.c_str(), 0);

  std::optional<ImageRecord> base;
  image::Dockerfile df = TRY(image::parse_dockerfile(
      text, req.build_args, [&](const std::string& from) -> Result<image::ImageConfig> {
        if (from == "host")
          return fail(Code::kInvalidArgument,
                      "FROM host: the host image is the host's own /usr, bound at run time, not "
                      "a tree a build can add to; import a base image (`space image import NAME "
                      "ARCHIVE`: an OCI layout, a docker-save archive or a rootfs tarball) and "
                      "build FROM it");
        auto rec = TRY(store_->get_image(from));
        if (!rec || rec->kind == "cache" || from.starts_with("."))
          return fail(Code::kNotFound, "FROM " + from.substr(0, 80) +
                                           ": no such image; `space image ls` lists images, "
                                           "`space image import NAME ARCHIVE` adds one");
        base = *rec;
        return images_.config(from);
      }));
  if (!base) return fail(Code::kInvalidArgument, "the Dockerfile has no FROM");

  std::lock_guard build_lock(build_mu_);
  const size_t of = df.steps.size() + 1;
  for (auto& w : df.warnings) progress({.kind = BuildEvent::Kind::kWarning, .text = w});
  progress({.kind = BuildEvent::Kind::kStep,
            .step = 1,
            .of = of,
            .text = "FROM " + df.from,
            .cached = true});
  progress({.kind = BuildEvent::Kind::kStepDone, .step = 1, .of = of, .cached = true});

  // The chain: a key and the tree (and the image name a sandbox is made from) after each step.
  std::string key =
      key_hash("space-build 1\nFROM " + base->name + "\n" + base->digest + "\n" +
               std::to_string(static_cast<int64_t>(base->created_at * 1e6)) + "\n" + base->path);
  std::string cur_image = base->name;
  fs::path cur_tree = base->path;
  bool all_cached = true;
  size_t cached_steps = 1, step_no = 1;

  for (const image::Step& step : df.steps) {
    ++step_no;
    const std::string where = "step " + std::to_string(step_no) + "/" + std::to_string(of) +
                              " (line " + std::to_string(step.line) + ": " +
                              step.text.substr(0, 200) + ")";
    auto started = std::chrono::steady_clock::now();
    auto done = [&](bool cached) {
      if (cached) ++cached_steps;
      progress(
          {.kind = BuildEvent::Kind::kStepDone,
           .step = step_no,
           .of = of,
           .cached = cached,
           .duration_s =
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()});
    };
    using Kind = image::Step::Kind;
    if (step.kind != Kind::kRun && step.kind != Kind::kCopy && step.kind != Kind::kWorkdir) {
      // Config only: the image's config is the parser's; nothing to run.
      progress({.kind = BuildEvent::Kind::kStep,
                .step = step_no,
                .of = of,
                .text = step.text,
                .cached = all_cached});
      done(all_cached);
      continue;
    }
    json what = {{"kind", static_cast<int>(step.kind)}, {"context", context_json(step.context)}};
    UniqueFd cur_root(::open(cur_tree.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!cur_root) return fail_sys("open", cur_tree.string());
    image::CopySpec copy;
    if (step.kind == Kind::kRun) {
      what["argv"] = step.argv;
    } else if (step.kind == Kind::kWorkdir) {
      what["dir"] = step.value;
    } else {
      auto [uid, gid] = TRY_CTX(resolve_owner(cur_root.get(), step.chown), where);
      copy = {.sources = step.sources,
              .dest = step.dest,
              .dest_is_dir = is_dir_in_root(cur_root.get(), step.dest),
              .uid = uid,
              .gid = gid,
              .chmod = step.chmod};
      what["sources"] = step.sources;
      what["dest"] = step.dest;
      what["dest_is_dir"] = copy.dest_is_dir;
      what["owner"] = {uid, gid};
      what["chmod"] = step.chmod ? json(*step.chmod) : json();
      what["content"] = TRY_CTX(image::copy_sources_digest(ctx_fd.get(), step.sources), where);
    }
    key = key_hash(key + "\n" + what.dump());

    std::optional<ImageRecord> hit;
    if (!req.no_cache) hit = TRY(images_.cache_get(key));
    progress({.kind = BuildEvent::Kind::kStep,
              .step = step_no,
              .of = of,
              .text = step.text,
              .cached = hit.has_value()});
    if (hit) {
      cur_image = hit->name;
      cur_tree = hit->path;
      done(true);
      continue;
    }
    all_cached = false;
    fs::path work = staging / ("step-" + std::to_string(step_no));
    fs::path layer = staging / ("step-" + std::to_string(step_no) + ".tar");
    std::error_code ec;
    fs::create_directories(work, ec);
    if (ec) return fail(Code::kInternal, "creating " + work.string() + ": " + ec.message());

    if (step.kind == Kind::kRun) {
      TRY_VOID_CTX(run_build_step(name, profile, req, cur_image, step, step_no, of, step_timeout,
                                  layer, progress),
                   where);
    } else if (step.kind == Kind::kCopy) {
      TRY_CTX(image::copy_layer(ctx_fd.get(), copy, layer, image::kDefaultLimits), where);
    }
    ImageRecord rec = TRY_CTX(images_.commit_step(key, cur_tree, work,
                                                  [&](int root_fd) -> Result<void> {
                                                    if (step.kind == Kind::kWorkdir)
                                                      return make_dirs_in_root(root_fd, step.value);
                                                    return images_.apply_build_layer(
                                                        layer, root_fd, "applying its changes");
                                                  }),
                              where);
    fs::remove(layer, ec);
    cur_image = rec.name;
    cur_tree = rec.path;
    done(false);
  }

  ImageRecord rec =
      TRY(images_.install_built(name, cur_tree, df.config.to_json(), "sha256:" + key));
  images_.evict_cache(kBuildCacheKeep);
  spdlog::info("built image {} from {} ({} steps, {} cached): {} files, {}", name, df.from, of,
               cached_steps, rec.files, format_size(rec.size_bytes));
  auto images = TRY(list_images());
  for (auto& i : images)
    if (i.name == name) return i;
  return fail(Code::kInternal, "image " + name + " was built but is not listed");
}

Result<void> Daemon::run_build_step(const std::string& name, const std::string& profile,
                                    const BuildRequest& req, const std::string& image,
                                    const image::Step& step, size_t step_no, size_t of,
                                    double step_timeout, const fs::path& layer,
                                    const std::function<void(const BuildEvent&)>& progress) {
  CreateRequest cr;
  cr.runtime = "linux";
  cr.image = image;
  cr.profile = profile;
  cr.secrets = req.secrets;
  cr.allow = req.allow;
  cr.workdir = step.context.workdir;
  cr.workdir_given = true;
  cr.timeout_s = step_timeout + 120;  // a backstop: the build destroys it when the step ends
  cr.snapshot_every_s = 0;
  cr.metadata = {{"space.build", name}, {"space.build.step", std::to_string(step_no)}};
  SandboxInfo sb = TRY_CTX(create(cr), "making the step's sandbox");
  struct Destroy {
    Daemon* d;
    std::string id;
    ~Destroy() {
      if (auto r = d->destroy(id, true); !r)
        spdlog::warn("build: destroying step sandbox {}: {}", id, r.error().message());
    }
  } destroy_sb{this, sb.id};

  ExecRequest er;
  er.argv = step.argv;
  er.env = step.context.env;
  er.env.insert(er.env.end(), step.context.args.begin(), step.context.args.end());
  er.cwd = step.context.workdir;
  er.user = step.context.user;
  er.timeout_s = step_timeout;
  auto session = TRY(exec(sb.id, er));
  ExitStatus status;
  for (;;) {
    auto ev = TRY_CTX(session->next(), "running the step");
    using K = ExecSession::Event::Kind;
    if (ev.kind == K::kStdout || ev.kind == K::kStderr) {
      progress({.kind = BuildEvent::Kind::kOutput,
                .step = step_no,
                .of = of,
                .text = ev.data,
                .is_stderr = ev.kind == K::kStderr});
      session->consumed(ev.data.size());
    } else if (ev.kind == K::kExit) {
      status = ev.exit;
      break;
    }
  }
  session.reset();
  if (!status.error.empty())
    return fail(Code::kInvalidArgument, "the command could not start: " + status.error);
  if (status.timed_out)
    return fail(Code::kTimeout, "the command ran longer than the step timeout (" +
                                    format_duration(step_timeout) + "; --step-timeout)");
  if (status.shell_code() != 0)
    return fail(
        Code::kInvalidArgument,
        std::string("the command ") +
            (status.exit_code
                 ? "exited with code " + std::to_string(*status.exit_code)
                 : "was killed by signal " + std::to_string(status.signal.value_or(0))) +
            (status.oom_killed ? " (out of memory: the build profile's memory limit)" : "") +
            "; its output is above");
  failpoint("image.build.after_run");  // the sandbox is a build's: the next start destroys it

  // What the command changed: the sandbox's upper layer, frozen while it is read.
  (void)pause(sb.id);
  auto sbp = registry_.find(sb.id);
  if (!sbp || !sbp->inst) return fail(Code::kInternal, "the step's sandbox went away");
  UniqueFd top = TRY(sbp->inst->writable_layer());
  UniqueFd upper(::openat(top.get(), "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return fail_sys("open", "the step's upper layer");
  // What spaced put there itself (the sandbox's CA and trust bundle, Chromium's policy and the
  // directories made for it, when nothing else came into them) is not the step's.
  drop_in_upper(upper.get(), "etc/chromium/policies/managed/space.json", false);
  for (const char* dir : {"etc/chromium/policies/managed", "etc/chromium/policies", "etc/chromium"})
    drop_in_upper(upper.get(), dir, true);  // only if empty
  std::set<std::string> skip = {"etc/space"};
  auto stats =
      TRY(image::upper_layer(upper.get(), sbp->rec.uid_base, skip, layer, image::kDefaultLimits));
  spdlog::debug("build {}: step {} changed {} entries, {} bytes", name, step_no, stats.entries,
                stats.bytes);
  return {};
}

void Daemon::sweep_build_sandboxes() {
  // A build's sandboxes live only while its step runs; after a restart no build is running,
  // so any left (a kill mid-step) go.
  std::vector<std::string> ids;
  registry_.sweep([&](const std::shared_ptr<Sandbox>& sb) {
    auto md = sb->rec.spec.find("metadata");
    if (md != sb->rec.spec.end() && md->is_object() && md->contains("space.build"))
      ids.push_back(sb->rec.id);
  });
  for (auto& id : ids) {
    spdlog::info("build: destroying {}, a step sandbox of a build cut short", id);
    (void)destroy(id, true);
  }
}

}  // namespace space::daemon

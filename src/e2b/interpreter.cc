// The code interpreter, the sandbox side of E2B's protocol on port 49999, as @e2b/code-interpreter
// calls it: POST /execute (a stream of JSON lines), GET/POST /contexts, DELETE /contexts/{id},
// POST /contexts/{id}/restart, GET /health.
//
// A context is SPACE's own interpreter (sdk/python/space_sandbox/interpreter.py, embedded in
// spaced at build time as kInterpreterPy): a long-lived `interpreter.py serve SOCKET` process in
// the sandbox, started as a detached exec, whose global namespace holds the variables between
// runs. Each /execute is one attached exec of `interpreter.py run SOCKET`, the code on its stdin
// and the events on its stdout, which this file turns into E2B's lines.
//
// Where contexts are kept: in the sandbox itself, under /tmp/.space/e2b (the script, one
// ctx-<id>.json {id, language, cwd} and ctx-<id>.sock per context, and "default-python" naming
// the default context). spaced holds no table of them, so nothing of theirs outlives the
// sandbox or needs cleaning when it is destroyed, they survive a restart of spaced, and a
// rollback takes them back to what the snapshot held (a context whose process a rollback
// stopped answers ContextError: restart it). A sandbox can tamper with these files, which harms
// only itself: spaced reads them bounded (kMaxMetaBytes, kMaxContexts) and makes paths only of
// ids it checked (valid_id).
// Bounds: kMaxContexts contexts per sandbox; creating, removing and restarting contexts of one
// sandbox are serialized (a striped lock), runs are not (a context runs one at a time, queued in
// its process).
//
// Timeouts: E2B's SDKs send none; runCode's timeoutMs aborts the request. When the client goes
// away mid-run, spaced signals the run (SIGINT), which interrupts the code in its context
// (KeyboardInterrupt) and leaves the context alive with its variables, as E2B's does. (A run
// still queued behind another when its client leaves is not withdrawn: it runs in its turn.)
// While a run is quiet, a {"type": "keepalive"} line every kKeepalive keeps clients' idle
// timeouts off; the SDKs skip types they do not know.
//
// Languages: Python ("python") only; other languages are an invalid_argument error that says so.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <thread>

#include "common/hex.h"
#include "e2b/handlers.h"
#include "e2b/interpreter_py.h"

namespace space::e2b {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using Event = daemon::ExecSession::Event;

const std::string kDir = "/tmp/.space/e2b";
const std::string kScript = kDir + "/interpreter.py";
const std::string kDefaultFile = kDir + "/default-python";
constexpr size_t kMaxContexts = 16;         // per sandbox, the default one included
constexpr size_t kMaxMetaBytes = 4096;      // a ctx-<id>.json
constexpr size_t kMaxEventLine = 64 << 20;  // one event of the interpreter (a large figure)
constexpr size_t kMaxCwd = 4096;
constexpr auto kStartTimeout = std::chrono::seconds(15);    // a context's process until it listens
constexpr auto kKeepalive = std::chrono::seconds(30);       // a line at least this often
constexpr auto kInterruptGrace = std::chrono::seconds(5);   // after SIGINT, before SIGKILL
constexpr auto kHoldText = std::chrono::milliseconds(200);  // output without its newline yet
constexpr size_t kMaxHeldText = 64 << 10;
const std::string kDefaultCwd = "/home/user";  // E2B's, as envd's default user's

constexpr std::string_view kLanguages =
    "SPACE's code interpreter serves Python contexts only (language \"python\"); run other "
    "languages with sandbox.commands.run";

struct Context {
  std::string id;
  std::string language = "python";
  std::string cwd;
};

json context_json(const Context& c) {
  return {{"id", c.id}, {"language", c.language}, {"cwd", c.cwd}};
}

std::string socket_path(const std::string& id) { return kDir + "/ctx-" + id + ".sock"; }
std::string meta_path(const std::string& id) { return kDir + "/ctx-" + id + ".json"; }

// Context ids are ours (uuid-shaped hex) but come back in URLs and from the sandbox's files:
// only these characters ever make a path.
bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return false;
  return true;
}

Result<std::string> new_id() {
  unsigned char b[16];
  if (::getrandom(b, sizeof b, 0) != ssize_t(sizeof b)) return fail_sys("getrandom");
  std::string h = to_hex(b, sizeof b);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

// Creating, removing and restarting the contexts of one sandbox happen one at a time. A fixed
// set of locks, picked by the sandbox's id: nothing to clean when sandboxes go.
std::mutex& sandbox_lock(const std::string& sandbox_id) {
  static std::array<std::mutex, 64> locks;
  return locks[std::hash<std::string>{}(sandbox_id) % locks.size()];
}

// A small file of the sandbox; nullopt if it does not exist.
Result<std::optional<std::string>> read_small(Call& call, const std::string& path) {
  std::string out;
  bool over = false;
  auto r = call.service.read_file(call.sandbox_id, path, [&](std::string_view chunk) {
    if (out.size() + chunk.size() > kMaxMetaBytes) {
      over = true;
      return false;
    }
    out.append(chunk);
    return true;
  });
  if (over) return std::optional<std::string>();  // not ours: treated as missing
  if (!r) {
    if (r.error().code() == Code::kNotFound) return std::optional<std::string>();
    return fail(std::move(r.error()));
  }
  return std::optional<std::string>(std::move(out));
}

Result<void> write_small(Call& call, const std::string& path, std::string_view content,
                         uint32_t mode) {
  bool sent = false;
  return call.service.write_file(
      call.sandbox_id, path, mode,
      [&](std::string& out) -> Result<void> {
        out.clear();
        if (!sent) out.assign(content);
        sent = true;
        return {};
      },
      /*parents=*/true);
}

void remove_quietly(Call& call, const std::string& path) {
  (void)call.service.remove(call.sandbox_id, path, /*recursive=*/false);
}

// The context `id` as its file says; nullopt if there is none (or it is not one of ours).
Result<std::optional<Context>> load_context(Call& call, const std::string& id) {
  if (!valid_id(id)) return std::optional<Context>();
  auto text = TRY(read_small(call, meta_path(id)));
  if (!text) return std::optional<Context>();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  Context c;
  c.id = id;
  if (j.is_object()) {
    if (auto it = j.find("language"); it != j.end() && it->is_string()) c.language = *it;
    if (auto it = j.find("cwd"); it != j.end() && it->is_string()) c.cwd = *it;
  }
  return std::optional<Context>(std::move(c));
}

// The ids of the contexts whose files are in the sandbox.
Result<std::vector<std::string>> context_ids(Call& call) {
  auto entries = call.service.list_dir(call.sandbox_id, kDir);
  if (!entries) {
    if (entries.error().code() == Code::kNotFound) return std::vector<std::string>();
    return fail(std::move(entries.error()));
  }
  std::vector<std::string> ids;
  for (const auto& e : *entries) {
    const std::string& n = e.name;
    if (n.size() > 9 && n.compare(0, 4, "ctx-") == 0 && n.compare(n.size() - 5, 5, ".json") == 0) {
      std::string id = n.substr(4, n.size() - 9);
      if (valid_id(id)) ids.push_back(std::move(id));
      if (ids.size() > kMaxContexts) break;  // enough to refuse one more; files not ours beyond
    }
  }
  return ids;
}

// Kills the process of context `id` (`interpreter.py serve SOCKET`), found by its command line.
Result<void> kill_context(Call& call, const std::string& id) {
  const std::string sock = socket_path(id);
  auto procs = TRY(call.service.processes(call.sandbox_id));
  for (const auto& p : procs)
    if (p.argv.size() >= 4 && p.argv[1] == kScript && p.argv[2] == "serve" && p.argv[3] == sock)
      (void)call.service.kill(call.sandbox_id, int(p.pid), SIGKILL);
  return {};
}

// The last `n` bytes of what a detached command wrote.
std::string output_tail(daemon::ExecLog& log, size_t n) {
  uint64_t cursor = 0;
  std::string out;
  for (int i = 0; i < 64; ++i) {
    auto r = log.read(cursor, Clock::now());
    for (auto& c : r.chunks) out += c.data;
    if (out.size() > n) out.erase(0, out.size() - n);
    if (!r.more) break;
  }
  return out;
}

// Starts the process of context `c` and waits until it listens on its socket.
Result<void> start_context(Call& call, const Context& c) {
  TRY_VOID(write_small(call, kScript, kInterpreterPy, 0644));
  remove_quietly(call, socket_path(c.id));
  remove_quietly(call, socket_path(c.id) + ".pid");
  daemon::ExecRequest req;
  req.argv = {"python3", kScript, "serve", socket_path(c.id)};
  req.env = {"SPACE_INTERPRETER_CWD=" + c.cwd, "PYTHONUNBUFFERED=1",
             "E2B_SANDBOX_ID=" + call.sandbox_id};
  req.cwd = "/";
  req.detach = true;
  auto session = TRY(call.service.exec(call.sandbox_id, req));
  int pid = 0;
  for (;;) {
    Event ev = TRY(session->next());
    if (ev.kind == Event::Kind::kStarted) {
      pid = ev.pid;
      break;
    }
    if (ev.kind == Event::Kind::kExit)
      return fail(Code::kUnavailable,
                  "the code context could not start (python3 " + kScript + "): " +
                      (ev.exit.error.empty() ? "exit code " + std::to_string(ev.exit.shell_code())
                                             : ev.exit.error));
    session->consumed(ev.data.size());
  }
  session.reset();  // detached: it runs on
  std::shared_ptr<daemon::ExecLog> log;
  if (auto l = call.service.exec_log(call.sandbox_id, pid)) log = *l;
  const auto deadline = Clock::now() + kStartTimeout;
  for (;;) {
    if (call.service.stat(call.sandbox_id, socket_path(c.id))) return {};
    if (log && log->wait(Clock::now())) {
      std::string out = output_tail(*log, 2000);
      return fail(Code::kUnavailable, "the code context's process ended as it started" +
                                          (out.empty() ? std::string() : ": " + out));
    }
    if (Clock::now() > deadline) {
      (void)kill_context(call, c.id);
      return fail(Code::kUnavailable, "the code context did not start within 15 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Makes a context (under the sandbox's lock).
Result<Context> create_locked(Call& call, std::string language, std::string cwd) {
  if (TRY(context_ids(call)).size() >= kMaxContexts)
    return fail(Code::kResourceExhausted,
                "this sandbox has " + std::to_string(kMaxContexts) +
                    " code contexts, the most SPACE keeps; remove one first");
  Context c;
  c.id = TRY(new_id());
  c.language = std::move(language);
  c.cwd = cwd.empty() ? kDefaultCwd : std::move(cwd);
  TRY_VOID(start_context(call, c));
  auto written = write_small(call, meta_path(c.id), api::json_text(context_json(c)) + "\n", 0600);
  if (!written) {
    (void)kill_context(call, c.id);
    return fail(std::move(written.error()));
  }
  return c;
}

// The default Python context, made on first use.
Result<Context> default_context(Call& call) {
  auto lookup = [&]() -> Result<std::optional<Context>> {
    auto id = TRY(read_small(call, kDefaultFile));
    if (!id) return std::optional<Context>();
    while (!id->empty() && (id->back() == '\n' || id->back() == ' ')) id->pop_back();
    return load_context(call, *id);
  };
  if (auto c = TRY(lookup())) return *c;
  std::lock_guard lock(sandbox_lock(call.sandbox_id));
  if (auto c = TRY(lookup())) return *c;
  Context c = TRY(create_locked(call, "python", ""));
  TRY_VOID(write_small(call, kDefaultFile, c.id + "\n", 0600));
  return c;
}

Result<Context> context_of(Call& call, const std::string& id) {
  auto c = TRY(load_context(call, id));
  if (!c) return fail(Code::kNotFound, "context " + id + " not found");
  return *c;
}

Result<std::string> language_field(const json& body) {
  auto it = body.find("language");
  if (it == body.end() || it->is_null()) return std::string("python");
  if (!it->is_string()) return fail(Code::kInvalidArgument, "language must be a string");
  std::string l = *it;
  if (l != "python" && l != "python3")
    return fail(Code::kInvalidArgument,
                "language \"" + l.substr(0, 64) + "\" is not served: " + std::string(kLanguages));
  return std::string("python");
}

Result<json> read_object(api::Exchange& ex) {
  json body = TRY(ex.read_json(json::object()));
  if (!body.is_object()) return fail(Code::kInvalidArgument, "the body must be a JSON object");
  return body;
}

// --- /contexts

Result<void> create_context(Call& call) {
  json body = TRY(read_object(call.ex));
  std::string language = TRY(language_field(body));
  std::string cwd;
  if (auto it = body.find("cwd"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return fail(Code::kInvalidArgument, "cwd must be a string");
    cwd = *it;
    if (cwd.empty() || cwd[0] != '/' || cwd.size() > kMaxCwd || cwd.find('\0') != std::string::npos)
      return fail(Code::kInvalidArgument, "cwd must be an absolute path");
  }
  std::lock_guard lock(sandbox_lock(call.sandbox_id));
  Context c = TRY(create_locked(call, std::move(language), std::move(cwd)));
  return call.ex.respond_json(http::status::ok, context_json(c));
}

Result<void> list_contexts(Call& call) {
  // E2B lists the default context from the start: make it if it is not there yet.
  Context def = TRY(default_context(call));
  json out = json::array();
  out.push_back(context_json(def));
  for (const auto& id : TRY(context_ids(call))) {
    if (id == def.id) continue;
    if (auto c = TRY(load_context(call, id))) out.push_back(context_json(*c));
  }
  return call.ex.respond_json(http::status::ok, out);
}

Result<void> remove_context(Call& call, const std::string& id) {
  std::lock_guard lock(sandbox_lock(call.sandbox_id));
  (void)TRY(context_of(call, id));
  TRY_VOID(kill_context(call, id));
  remove_quietly(call, meta_path(id));
  remove_quietly(call, socket_path(id));
  remove_quietly(call, socket_path(id) + ".pid");
  if (auto d = TRY(read_small(call, kDefaultFile)); d && d->substr(0, d->find('\n')) == id)
    remove_quietly(call, kDefaultFile);
  return call.ex.respond_no_content();
}

Result<void> restart_context(Call& call, const std::string& id) {
  std::lock_guard lock(sandbox_lock(call.sandbox_id));
  Context c = TRY(context_of(call, id));
  TRY_VOID(kill_context(call, id));
  TRY_VOID(start_context(call, c));
  return call.ex.respond_no_content();
}

// --- /execute

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A result event of interpreter.py ({"data": {mime: value}, "is_main"}) as E2B's: one field per
// known format, the others under "extra".
json result_line(const json& ev) {
  static const std::vector<std::pair<std::string_view, std::string_view>> kFormats = {
      {"text/plain", "text"},        {"text/html", "html"},
      {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
      {"image/png", "png"},          {"image/jpeg", "jpeg"},
      {"application/pdf", "pdf"},    {"text/latex", "latex"},
      {"application/json", "json"},  {"application/javascript", "javascript"}};
  json out = {{"type", "result"}};
  json extra = json::object();
  if (auto d = ev.find("data"); d != ev.end() && d->is_object()) {
    for (auto& [mime, value] : d->items()) {
      bool known = false;
      for (auto [m, field] : kFormats) {
        if (mime != m) continue;
        known = true;
        if (field == "json" && value.is_string()) {
          json parsed = json::parse(value.get<std::string>(), nullptr, false);
          out["json"] = parsed.is_discarded() ? value : parsed;
        } else {
          out[std::string(field)] = value;
        }
      }
      if (!known) extra[mime] = value;
    }
  }
  if (!extra.empty()) out["extra"] = std::move(extra);
  auto m = ev.find("is_main");
  out["is_main_result"] = m != ev.end() && m->is_boolean() && m->get<bool>();
  return out;
}

std::string str_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Turns the run's stdout (interpreter.py's JSON lines) into E2B's lines. interpreter.py sends
// each write to sys.stdout as an event of its own (print("a", 1) is four); E2B's kernel sends
// whole lines. So stdout (stderr) text is held until it ends a line, another kind of event comes,
// it grows past kMaxHeldText, or it waited kHoldText (flush_stale, from another thread: the
// caller serializes).
class Translator {
 public:
  // E2B's lines for `bytes` more of the run's stdout.
  std::string feed(std::string_view bytes) {
    std::string out;
    size_t start = 0;
    for (;;) {
      size_t nl = bytes.find('\n', start);
      std::string_view piece =
          bytes.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
      if (skipping_) {
        if (nl != std::string_view::npos) skipping_ = false;
      } else if (pending_.size() + piece.size() > kMaxEventLine) {
        pending_.clear();
        skipping_ = nl == std::string_view::npos;
        flush_stream(out);
        emit(out, {{"type", "stderr"},
                   {"text", "[SPACE: an output event over 64 MiB was dropped]\n"},
                   {"timestamp", now_ns()}});
      } else {
        pending_.append(piece);
        if (nl != std::string_view::npos) {
          line(out, pending_);
          pending_.clear();
        }
      }
      if (nl == std::string_view::npos) break;
      start = nl + 1;
    }
    if (!stream_text_.empty()) {
      if (stream_text_.back() == '\n' || stream_text_.size() > kMaxHeldText)
        flush_stream(out);
      else if (!held_since_)
        held_since_ = Clock::now();
    }
    return out;
  }
  // Held text that waited long enough, as E2B's line.
  std::string flush_stale() {
    std::string out;
    if (held_since_ && Clock::now() - *held_since_ >= kHoldText) flush_stream(out);
    return out;
  }
  // What is still held, at the run's end.
  std::string finish() {
    std::string out;
    flush_stream(out);
    return out;
  }
  bool ended() const { return ended_; }

 private:
  void emit(std::string& out, const json& j) { out += api::json_text(j) + "\n"; }
  void flush_stream(std::string& out) {
    if (stream_text_.empty()) return;
    emit(out, {{"type", stream_type_}, {"text", stream_text_}, {"timestamp", now_ns()}});
    stream_text_.clear();
    held_since_.reset();
  }
  void line(std::string& out, std::string_view text) {
    json ev = json::parse(text, nullptr, false);
    if (!ev.is_object()) return;
    std::string type = str_field(ev, "type");
    if (type == "stdout" || type == "stderr") {
      if (type != stream_type_) flush_stream(out);
      stream_type_ = type;
      stream_text_ += str_field(ev, "text");
      return;
    }
    flush_stream(out);
    if (type == "result") {
      emit(out, result_line(ev));
    } else if (type == "error") {
      emit(out, {{"type", "error"},
                 {"name", str_field(ev, "name")},
                 {"value", str_field(ev, "value")},
                 {"traceback", str_field(ev, "traceback")}});
    } else if (type == "end") {
      if (auto n = ev.find("execution_count"); n != ev.end() && n->is_number_integer())
        emit(out, {{"type", "number_of_executions"}, {"execution_count", *n}});
      emit(out, {{"type", "end_of_execution"}});
      ended_ = true;
    }
  }

  std::string pending_;
  bool skipping_ = false;
  std::string stream_type_ = "stdout", stream_text_;
  std::optional<Clock::time_point> held_since_;
  bool ended_ = false;
};

Result<void> execute(Call& call) {
  json body = TRY(read_object(call.ex));
  auto code_it = body.find("code");
  if (code_it == body.end() || !code_it->is_string())
    return fail(Code::kInvalidArgument, "code must be a string");
  std::string code = *code_it;
  std::string context_id;
  if (auto it = body.find("context_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return fail(Code::kInvalidArgument, "context_id must be a string");
    context_id = *it;
  }
  const bool has_language = body.contains("language") && !body["language"].is_null();
  if (!context_id.empty() && has_language)
    return fail(Code::kInvalidArgument, "give context_id or language, not both");
  (void)TRY(language_field(body));
  std::vector<std::string> env;
  if (auto it = body.find("env_vars"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return fail(Code::kInvalidArgument, "env_vars must be an object");
    for (auto& [k, v] : it->items())
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return fail(Code::kInvalidArgument,
                    "env_vars: \"" + k + "\" must be a name without '=' with a string value");
    env.push_back("SPACE_INTERPRETER_ENV=" + api::json_text(*it));
  }
  Context ctx;
  if (context_id.empty())
    ctx = TRY(default_context(call));
  else
    ctx = TRY(context_of(call, context_id));

  daemon::ExecRequest req;
  req.argv = {"python3", kScript, "run", socket_path(ctx.id)};
  req.env = std::move(env);
  req.cwd = "/";
  req.stdin = true;
  std::unique_ptr<daemon::ExecSession> session = TRY(call.service.exec(call.sandbox_id, req));
  daemon::ExecSession& s = *session;
  TRY_VOID(s.write_stdin(code));
  TRY_VOID(s.close_stdin());

  UniqueFd done(::eventfd(0, EFD_CLOEXEC));
  if (!done) return fail_sys("eventfd");
  TRY_VOID(call.ex.begin_chunked(http::status::ok, "application/x-ndjson",
                                 {{"Cache-Control", "no-store"}}));

  std::mutex write_mu;  // the run's lines and the keepalives
  Clock::time_point last_write = Clock::now();
  std::atomic<bool> finished{false}, gone{false}, interrupted{false};
  auto write = [&](std::string_view text) {
    std::lock_guard l(write_mu);
    last_write = Clock::now();
    if (gone) return;
    if (!call.ex.write_chunk(text).has_value()) gone = true;
  };
  // The client went away (runCode's timeout, a killed client) or spaced stops: interrupt the
  // code in its context, which lives on; a run that does not end soon after is killed.
  auto interrupt = [&] {
    if (interrupted.exchange(true)) return;
    s.signal(SIGINT);
  };

  call.ex.set_read_interrupt_fd(done.get());
  std::thread helper([&] {
    call.ex.wait_client_hangup();
    if (finished) return;
    gone = true;
    interrupt();
    pollfd p{done.get(), POLLIN, 0};
    if (::poll(&p, 1, int(std::chrono::milliseconds(kInterruptGrace).count())) == 0)
      s.signal(SIGKILL);
  });
  Translator tr;
  std::mutex tr_mu;  // the translator, and the order of its lines (taken before write_mu)
  std::thread ticker([&] {
    for (int tick = 1;; ++tick) {
      pollfd p{done.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) != 0) return;  // done (or an error): the run is over
      // About once a second: the API token behind the envd token still holds; revoked or
      // expired, the run is interrupted and its stream cut (the context lives on).
      if (tick % 10 == 0 && call.still_allowed && !gone && !call.still_allowed()) {
        gone = true;
        interrupt();
        continue;
      }
      {
        std::lock_guard l(tr_mu);
        if (std::string held = tr.flush_stale(); !held.empty()) write(held);
      }
      bool due;
      {
        std::lock_guard l(write_mu);
        due = Clock::now() - last_write >= kKeepalive;
      }
      // A line now and then: a client's idle timeout (Node's fetch: 300 s without a byte)
      // does not end a quiet run. E2B's SDKs skip types they do not know.
      if (due) write("{\"type\":\"keepalive\"}\n");
    }
  });

  std::string stderr_tail;
  std::optional<Error> lost;
  std::optional<daemon::ExitStatus> exit;
  while (!exit) {
    auto ev = s.next();
    if (!ev) {
      lost = std::move(ev.error());
      break;
    }
    switch (ev->kind) {
      case Event::Kind::kStdout: {
        std::lock_guard l(tr_mu);
        if (std::string lines = tr.feed(ev->data); !lines.empty()) write(lines);
        if (gone) interrupt();
        break;
      }
      case Event::Kind::kStderr:
        stderr_tail += ev->data;
        if (stderr_tail.size() > 4000) stderr_tail.erase(0, stderr_tail.size() - 4000);
        break;
      case Event::Kind::kExit:
        exit = ev->exit;
        break;
      case Event::Kind::kStarted:
        break;
    }
    s.consumed(ev->data.size());
  }
  {
    std::lock_guard tr_lock(tr_mu);  // released before the ticker is joined
    std::string tail = tr.finish();
    if (!tr.ended()) {
      std::string why;
      if (lost)
        why = "the sandbox went away: " + lost->message();
      else if (exit && !exit->error.empty())
        why = "the interpreter could not start: " + exit->error;
      else if (exit)
        why = "the interpreter exited with " +
              (exit->exit_code ? std::to_string(*exit->exit_code)
                               : "signal " + std::to_string(exit->signal.value_or(0))) +
              (stderr_tail.empty() ? "" : ": " + stderr_tail);
      json err = {
          {"type", "error"}, {"name", "InterpreterError"}, {"value", why}, {"traceback", ""}};
      tail +=
          api::json_text(err) + "\n" + api::json_text(json{{"type", "end_of_execution"}}) + "\n";
    }
    if (!tail.empty()) write(tail);
  }

  finished = true;
  uint64_t one = 1;
  (void)!::write(done.get(), &one, sizeof one);
  helper.join();
  ticker.join();
  call.ex.set_read_interrupt_fd(-1);
  session.reset();
  if (gone || !call.ex.end_chunked().has_value()) call.ex.mark_broken();
  return {};
}

}  // namespace

Result<void> serve_interpreter(Call& call) {
  const auto& seg = call.ex.target().segments;
  const http::verb m = call.ex.method();
  auto info = call.service.inspect(call.sandbox_id);
  if (!info || info->destroyed_at)
    return respond_error(call.ex, 502, "sandbox " + call.sandbox_id + " is not running");
  if (seg.size() == 1 && seg[0] == "health" && m == http::verb::get)
    return call.ex.respond(http::status::ok, "application/json", "\"OK\"");
  if (seg.size() == 1 && seg[0] == "execute" && m == http::verb::post) return execute(call);
  if (seg.size() == 1 && seg[0] == "contexts" && m == http::verb::get) return list_contexts(call);
  if (seg.size() == 1 && seg[0] == "contexts" && m == http::verb::post) return create_context(call);
  if (seg.size() == 2 && seg[0] == "contexts" && m == http::verb::delete_)
    return remove_context(call, seg[1]);
  if (seg.size() == 3 && seg[0] == "contexts" && seg[2] == "restart" && m == http::verb::post)
    return restart_context(call, seg[1]);
  return fail(Code::kNotFound,
              "the code interpreter: no route for " + std::string(call.ex.method_string()) + " " +
                  call.ex.target().path + " (SPACE's serves /execute, /contexts and /health)");
}

}  // namespace space::e2b

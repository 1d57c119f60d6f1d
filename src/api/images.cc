// Handlers for images: import a root filesystem tarball (streamed, any compression libarchive
// reads), list, remove, and build the VM disk (progress streamed as NDJSON). Both streams stop
// once the caller's token is revoked or expires (StreamAuth): an import fails with 401, a
// build's progress stream ends with an "error" event (the build itself goes on and is cached,
// as when a client leaves).
#include "api/handlers.h"
#include "api/views.h"

namespace space::api::handlers {

Result<void> import_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::optional<Error> refused;
  daemon::ChunkSource body = guarded_body(ex, auth, refused);
  auto image = ctx.service.import_image(name, body);
  if (refused) return fail(std::move(*refused).wrap("importing image " + name));
  if (!image) return fail(std::move(image.error()).wrap("importing image " + name));
  return ex.respond_json(http::status::created, to_json(*image));
}

Result<void> list_images(Exchange& ex, ApiContext& ctx) {
  std::vector<daemon::ImageInfo> images = TRY(ctx.service.list_images());
  return ex.respond_json(http::status::ok, {{"images", to_json(images)}});
}

Result<void> delete_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  TRY_VOID(ctx.service.remove_image(name));
  return ex.respond_no_content();
}

// POST /v1/images/{name}/vm. Errors found before any work starts (unknown image, the host
// image, no agent) are plain error responses; once the build has begun the response is a
// stream of NDJSON events, as exec's: {"type":"progress","message":...} per step, then
// {"type":"done","disk":{...}} or {"type":"error","error":{"code","message"}}.
Result<void> build_image_vm(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  bool streaming = false, broken = false;
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::optional<Error> refused;  // the caller's token went bad before the stream began
  auto emit = [&](const nlohmann::json& event) {
    if (broken) return;  // the client left; the build still finishes and is cached
    if (auto valid = auth.check(); !valid) {
      // The caller's token went bad: a last event saying so (or a 401), and no more.
      Error e = std::move(valid.error()).wrap("building the VM disk of image " + name);
      if (streaming)
        (void)ex.write_chunk(json_text({{"type", "error"}, {"error", error_body(e)["error"]}}) +
                             "\n");
      else
        refused = std::move(e);
      broken = true;
      return;
    }
    if (!streaming) {
      if (!ex.begin_chunked(http::status::ok, "application/x-ndjson",
                            {{"Cache-Control", "no-store"}})) {
        broken = true;
        return;
      }
      streaming = true;
    }
    if (!ex.write_chunk(json_text(event) + "\n")) broken = true;
  };
  auto disk = ctx.service.build_image_vm(name, [&](const std::string& message) {
    emit({{"type", "progress"}, {"message", message}});
  });
  if (!disk) {
    Error e = std::move(disk.error()).wrap("building the VM disk of image " + name);
    if (!streaming) return fail(std::move(e));
    emit({{"type", "error"}, {"error", error_body(e)["error"]}});
  } else {
    emit({{"type", "done"}, {"disk", to_json(*disk)}});
  }
  if (refused) return fail(std::move(*refused));
  if (broken) {
    ex.mark_broken();
    return {};
  }
  return ex.end_chunked();
}

}  // namespace space::api::handlers

// Handlers for images: import a root filesystem tarball (streamed, any compression libarchive
// reads), list, remove.
#include "api/handlers.h"

namespace space::api::handlers {

Result<void> import_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  nlohmann::json image =
      TRY_CTX(ctx.service.import_image(name, ex.body_source()), "importing image " + name);
  return ex.respond_json(http::status::created, image);
}

Result<void> list_images(Exchange& ex, ApiContext& ctx) {
  nlohmann::json images = TRY(ctx.service.list_images());
  return ex.respond_json(http::status::ok, {{"images", std::move(images)}});
}

Result<void> delete_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  TRY_VOID(ctx.service.remove_image(name));
  return ex.respond_no_content();
}

}  // namespace space::api::handlers

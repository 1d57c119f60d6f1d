// Where a granted secret's value goes in a request the gateway intercepted, and nowhere else
// (credentials.h has the definitions): its configured header, and the placeholder inside the
// header fields and query parameters its definition lists. In `Authorization`, a `Basic`
// credential (base64 of `user:password`, what git, pip and curl send for a token in a URL or a
// credential helper) is decoded, the placeholder replaced inside it, and encoded again.
#pragma once

#include <boost/beast/http/message.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "egress/credentials.h"

namespace space::egress {

// Puts `value` into `req` where `def` says, replacing `placeholder`. The caller has checked
// that the secret is granted and that its binding applies to the request.
void inject(boost::beast::http::request_header<>& req, const SecretDef& def,
            std::string_view placeholder, std::string_view value);

// One Authorization field's value with the placeholder replaced, or nullopt if it holds none.
// A `Basic` credential is replaced inside its decoded `user:password` only; one that is not
// strict base64 (or decodes to no placeholder) is left untouched. Any other scheme's value is
// replaced as text.
std::optional<std::string> substitute_authorization(std::string_view field,
                                                    std::string_view placeholder,
                                                    std::string_view value);

}  // namespace space::egress

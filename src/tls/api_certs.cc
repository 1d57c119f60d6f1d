// spaced's API certificates: its own CA and server certificate, or the operator's files (see
// api_certs.h).
#include "tls/api_certs.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <system_error>

namespace space::tls {
namespace {

namespace fs = std::filesystem;

time_t now_or(time_t t) { return t != 0 ? t : std::time(nullptr); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The text form inet_ntop gives an address ("0:0::1" -> "::1"); other text unchanged.
std::string canonical_address(const std::string& host) {
  unsigned char addr[16];
  char text[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, host.c_str(), addr) == 1) {
    return inet_ntop(AF_INET, addr, text, sizeof text) ? text : host;
  }
  if (inet_pton(AF_INET6, host.c_str(), addr) == 1) {
    return inet_ntop(AF_INET6, addr, text, sizeof text) ? text : host;
  }
  return host;
}

struct LoadedPair {
  PkeyPtr key;
  std::vector<std::shared_ptr<X509>> certs;  // the certificate, then its chain
};

// Reads and parses a key file and a certificate file; errors name the file.
Result<LoadedPair> read_pair(const fs::path& key_file, const fs::path& cert_file, bool follow) {
  LoadedPair p;
  // Operator's files (follow: given paths) may be readable by a group spaced is in.
  std::string key_text = TRY(read_small_file(key_file, true, follow, follow));
  p.key = TRY_CTX(parse_key_pem(std::move(key_text)), key_file.string());
  std::string cert_text = TRY(read_small_file(cert_file, false, follow));
  p.certs = TRY_CTX(parse_certs_pem(cert_text), cert_file.string());
  if (X509_check_private_key(p.certs.front().get(), p.key.get()) != 1) {
    return fail(ossl_error(
        key_file.string() + " is not the key of the certificate in " + cert_file.string(),
        Code::kInvalidArgument));
  }
  return p;
}

Result<void> write_pair(const fs::path& key_file, const fs::path& cert_file, const KeyCert& kc) {
  std::string key = key_pem(kc.key.get());
  std::string cert = cert_pem(kc.cert.get());
  if (key.empty() || cert.empty()) return fail_ossl("encoding PEM");
  auto written = write_file_atomic(key_file, key, 0600);
  OPENSSL_cleanse(key.data(), key.size());
  TRY_VOID(std::move(written));
  return write_file_atomic(cert_file, cert, 0644);
}

KeyCert owned(PkeyPtr key, X509Ptr cert) {
  return KeyCert{std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free),
                 std::shared_ptr<X509>(cert.release(), X509_free),
                 {}};
}

Result<KeyCert> make_ca(time_t now, std::chrono::seconds lifetime) {
  PkeyPtr key = TRY(new_p256_key());
  X509Ptr cert = TRY(new_cert(key.get(), now));
  if (!ASN1_TIME_set(X509_getm_notAfter(cert.get()), now + lifetime.count())) {
    return fail_ossl("setting notAfter");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  TRY_VOID(add_name_entry(name, "O", "SPACE"));
  TRY_VOID(add_name_entry(name, "CN", "SPACE spaced API CA"));
  if (!X509_set_issuer_name(cert.get(), name)) return fail_ossl("X509_set_issuer_name");
  TRY_VOID(add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  TRY_VOID(add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  TRY_VOID(add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  TRY_VOID(sign(cert.get(), key.get()));
  return owned(std::move(key), std::move(cert));
}

Result<KeyCert> issue_server(const KeyCert& ca, const std::vector<std::string>& names, time_t now,
                             std::chrono::seconds lifetime) {
  PkeyPtr key = TRY(new_p256_key());
  X509Ptr cert = TRY(new_cert(key.get(), now));
  // Not past the CA: a chain is valid only as long as its shortest-lived certificate.
  ASN1_TIME* until = ASN1_TIME_set(nullptr, now + lifetime.count());
  bool set =
      until != nullptr &&
      X509_set1_notAfter(cert.get(), ASN1_TIME_compare(until, X509_get0_notAfter(ca.cert.get())) < 0
                                         ? until
                                         : X509_get0_notAfter(ca.cert.get())) == 1;
  ASN1_TIME_free(until);
  if (!set) return fail_ossl("setting notAfter");
  TRY_VOID(add_name_entry(X509_get_subject_name(cert.get()), "O", "SPACE"));
  TRY_VOID(add_name_entry(X509_get_subject_name(cert.get()), "CN", "spaced"));
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.cert.get()))) {
    return fail_ossl("X509_set_issuer_name");
  }
  X509* issuer = ca.cert.get();
  TRY_VOID(add_ext(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE"));
  TRY_VOID(add_ext(cert.get(), issuer, NID_key_usage, "critical,digitalSignature"));
  TRY_VOID(add_ext(cert.get(), issuer, NID_ext_key_usage, "serverAuth"));
  TRY_VOID(add_ext(cert.get(), issuer, NID_subject_key_identifier, "hash"));
  TRY_VOID(add_ext(cert.get(), issuer, NID_authority_key_identifier, "keyid:always"));
  TRY_VOID(add_subject_alt_names(cert.get(), names, false));
  TRY_VOID(sign(cert.get(), ca.key.get()));
  return owned(std::move(key), std::move(cert));
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Whether the saved server certificate can stay: issued by `ca`, the same names, not near
// expiry. Any problem reading it just means issuing a new one.
std::optional<KeyCert> reusable_server(const AutoCertOptions& o, const KeyCert& ca, time_t now) {
  auto pair = read_pair(o.dir / "server.key", o.dir / "server.pem", false);
  if (!pair) return std::nullopt;
  X509* cert = pair->certs.front().get();
  if (X509_check_issued(ca.cert.get(), cert) != X509_V_OK || X509_verify(cert, ca.key.get()) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  if (time_left(cert, now) < o.renew_before) return std::nullopt;
  if (sorted(subject_alt_names(cert)) != sorted(o.names)) return std::nullopt;
  return KeyCert{
      std::shared_ptr<EVP_PKEY>(pair->key.release(), EVP_PKEY_free), pair->certs.front(), {}};
}

}  // namespace

Result<AutoCerts> ensure_auto_certs(const AutoCertOptions& o) {
  const time_t now = now_or(o.now);
  const std::string where = "api_tls \"auto\" in " + o.dir.string();
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) return fail(Error::sys("mkdir", o.dir.string(), ec.value()).wrap(where));
  // The CA certificate is for copying to clients; the keys inside are 0600.
  if (::chmod(o.dir.c_str(), 0755) != 0)
    return fail(Error::sys("chmod", o.dir.string()).wrap(where));

  AutoCerts out;
  out.ca_file = o.dir / "ca.pem";
  const fs::path ca_key = o.dir / "ca.key";
  KeyCert ca;
  bool have_ca = fs::exists(ca_key, ec) || fs::exists(out.ca_file, ec);
  if (have_ca) {
    auto pair = read_pair(ca_key, out.ca_file, false);
    if (!pair) {
      return fail(std::move(pair.error())
                      .wrap(where + ": the CA cannot be used (fix its files, or move " +
                            o.dir.string() +
                            " aside to make a new CA, which every client must then trust "
                            "instead)"));
    }
    if (X509_check_ca(pair->certs.front().get()) < 1) {
      return fail(Code::kInvalidArgument, where + ": " + out.ca_file.string() +
                                              " is not a CA certificate; move " + o.dir.string() +
                                              " aside to make a new CA");
    }
    ca = KeyCert{
        std::shared_ptr<EVP_PKEY>(pair->key.release(), EVP_PKEY_free), pair->certs.front(), {}};
    // A CA about to expire is replaced (clients must fetch the new ca.pem).
    if (time_left(ca.cert.get(), now) < o.renew_before * 2) have_ca = false;
  }
  if (!have_ca) {
    ca = TRY_CTX(make_ca(now, o.ca_lifetime), where + ": making the CA");
    TRY_VOID_CTX(write_pair(ca_key, out.ca_file, ca), where + ": saving the CA");
    out.ca_created = true;
  }
  if (!out.ca_created) {
    if (auto kept = reusable_server(o, ca, now)) {
      out.server = std::move(*kept);
      return out;
    }
  }
  out.server = TRY_CTX(issue_server(ca, o.names, now, o.server_lifetime),
                       where + ": issuing the server certificate");
  TRY_VOID_CTX(write_pair(o.dir / "server.key", o.dir / "server.pem", out.server),
               where + ": saving the server certificate");
  out.server_issued = true;
  return out;
}

Result<KeyCert> load_cert_files(const fs::path& cert_file, const fs::path& key_file) {
  auto pair = read_pair(key_file, cert_file, true);
  if (!pair) {
    return fail(std::move(pair.error())
                    .wrap("api_tls: loading the certificate " + cert_file.string() +
                          " and its key " + key_file.string() +
                          " (PEM files: the certificate then any intermediates; an unencrypted "
                          "key, mode 0600)"));
  }
  KeyCert kc;
  kc.key = std::shared_ptr<EVP_PKEY>(pair->key.release(), EVP_PKEY_free);
  kc.cert = pair->certs.front();
  kc.chain.assign(pair->certs.begin() + 1, pair->certs.end());
  if (time_left(kc.cert.get(), std::time(nullptr)).count() <= 0) {
    return fail(Code::kInvalidArgument, "api_tls: the certificate " + cert_file.string() +
                                            " has expired; renew it (spaced reloads it when "
                                            "the file changes)");
  }
  return kc;
}

Result<std::vector<std::string>> server_names(std::string_view hostname,
                                              std::string_view listen_host,
                                              const std::vector<std::string>& extra) {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
  auto add = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  std::string host = lower(hostname);
  if (is_normalized_dns_name(host)) add(host);
  std::string listen = canonical_address(std::string(listen_host));
  if (is_ip_address(listen) && listen != "0.0.0.0" && listen != "::") add(listen);
  for (const std::string& e : extra) {
    std::string n = canonical_address(lower(e));
    if (!is_ip_address(n) && !is_normalized_dns_name(n)) {
      return fail(Code::kInvalidArgument,
                  "api_tls.names: \"" + e.substr(0, 100) +
                      "\" is not a DNS name or an IP address (no wildcards, no ports)");
    }
    add(n);
  }
  return names;
}

Result<std::unique_ptr<ServerCredentials>> ServerCredentials::open(Source source) {
  std::unique_ptr<ServerCredentials> c(new ServerCredentials());
  c->source_ = std::move(source);
  c->ctx_ = TRY(c->load());
  c->next_check_ = std::chrono::steady_clock::now() + kCheckInterval;
  return c;
}

Result<std::shared_ptr<SSL_CTX>> ServerCredentials::load() {
  KeyCert kc;
  if (!source_.cert_file.empty()) {
    stamp_ = file_stamp();
    kc = TRY(load_cert_files(source_.cert_file, source_.key_file));
  } else {
    AutoCerts a = TRY(ensure_auto_certs(source_.auto_certs));
    ca_created_ = ca_created_ || a.ca_created;
    kc = std::move(a.server);
    cert_left_ = time_left(kc.cert.get(), std::time(nullptr));
  }
  loaded_at_ = std::time(nullptr);
  return server_context(kc, source_.client_ca);
}

std::string ServerCredentials::file_stamp() const {
  std::string out;
  for (const fs::path& p : {source_.cert_file, source_.key_file}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return "missing";
    out += std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return out;
}

bool ServerCredentials::stale() {
  if (!source_.cert_file.empty()) return file_stamp() != stamp_;
  auto left = cert_left_ - std::chrono::seconds(std::time(nullptr) - loaded_at_);
  return left < source_.auto_certs.renew_before;
}

std::shared_ptr<SSL_CTX> ServerCredentials::context(std::string* reload_error) {
  std::lock_guard lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (now >= next_check_) {
    next_check_ = now + kCheckInterval;
    if (stale()) {
      auto fresh = load();
      if (fresh) {
        ctx_ = std::move(*fresh);
      } else if (reload_error != nullptr) {
        *reload_error = fresh.error().message();
      }
    }
  }
  return ctx_;
}

std::string ServerCredentials::describe() const {
  std::string mtls;
  if (!source_.client_ca.empty())
    mtls = "; clients need a certificate from " + source_.client_ca.string();
  if (!source_.cert_file.empty()) return "certificate " + source_.cert_file.string() + mtls;
  const fs::path& d = source_.auto_certs.dir;
  return "certificate " + (d / "server.pem").string() + " from spaced's CA " +
         (d / "ca.pem").string() + mtls;
}

}  // namespace space::tls

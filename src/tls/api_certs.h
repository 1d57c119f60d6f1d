// The certificates of spaced's TLS API listener (api_tls, docs/api-auth.md "Remote access"):
// either the operator's own (a certificate file, possibly with its chain, and a key file), or
// made by spaced under <state_dir>/tls/:
//
//   ca.pem      the CA clients trust (SPACE_CA=.../ca.pem, ca_file=, caFile:), mode 0644
//   ca.key      its key, mode 0600; made once and kept, so clients keep trusting it
//   server.pem  the listener's certificate, signed by the CA, mode 0644
//   server.key  its key, mode 0600
//
// The server certificate names localhost, 127.0.0.1, ::1, the host's name, the listen address
// (when it is one address) and the configured extra names. It is issued again when it is
// missing, was not issued by ca.pem, names other names, or expires within renew_before; the CA
// is made again only when it is missing or itself near expiry.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tls/x509.h"

namespace space::tls {

struct AutoCertOptions {
  std::filesystem::path dir;       // <state_dir>/tls
  std::vector<std::string> names;  // the server certificate's names (server_names())
  std::chrono::seconds ca_lifetime{std::chrono::hours(24 * 3650)};
  std::chrono::seconds server_lifetime{std::chrono::hours(24 * 397)};
  std::chrono::seconds renew_before{std::chrono::hours(24 * 30)};
  time_t now = 0;  // 0: the current time (tests set it)
};

struct AutoCerts {
  KeyCert server;  // the server's key and certificate
  std::filesystem::path ca_file;
  bool ca_created = false;     // a new CA was made (clients must fetch ca.pem again)
  bool server_issued = false;  // a new server certificate was issued
};

// Makes or checks the files above. A CA that cannot be read (a broken ca.key, a ca.pem that
// does not match it) is an error naming the file and what to do, never silently replaced.
[[nodiscard]] Result<AutoCerts> ensure_auto_certs(const AutoCertOptions& options);

// The operator's certificate file (PEM: the certificate, then any intermediates) and key file
// (PEM, unencrypted, not readable by group or others). Errors name the file and the fix.
[[nodiscard]] Result<KeyCert> load_cert_files(const std::filesystem::path& cert_file,
                                              const std::filesystem::path& key_file);

// The server certificate's names: localhost, 127.0.0.1, ::1, `hostname` (if a DNS name),
// `listen_host` (unless it is a wildcard address such as 0.0.0.0 or ::), then `extra`, lower
// case and without duplicates. An extra name that is not a DNS name or an IP address is an
// error.
[[nodiscard]] Result<std::vector<std::string>> server_names(std::string_view hostname,
                                                            std::string_view listen_host,
                                                            const std::vector<std::string>& extra);

// What the API listener accepts with: the context for the current certificate. Every
// check_interval at most, context() looks whether the certificate should be reloaded (given
// files: changed on disk; auto: within renew_before of expiry) and swaps in a fresh context; a
// reload that fails keeps the previous one and is reported once through `reload_error`.
class ServerCredentials {
 public:
  struct Source {
    // Given files (cert_file non-empty) or auto (auto_certs.dir non-empty).
    std::filesystem::path cert_file, key_file;
    AutoCertOptions auto_certs;
    // Mutual TLS (a cluster node, docs/cluster.md): clients must present a certificate signed
    // by a CA in this PEM file. Empty: any client (tokens authenticate it).
    std::filesystem::path client_ca;
  };
  [[nodiscard]] static Result<std::unique_ptr<ServerCredentials>> open(Source source);

  std::shared_ptr<SSL_CTX> context(std::string* reload_error = nullptr);
  // For the log line: "certificate F" or "certificate <dir>/server.pem, CA <dir>/ca.pem".
  std::string describe() const;
  // Set by open() in auto mode: whether it made a new CA / issued a server certificate.
  bool ca_created() const { return ca_created_; }
  // Whether clients must present a certificate (Source::client_ca).
  bool mutual() const { return !source_.client_ca.empty(); }

  static constexpr std::chrono::seconds kCheckInterval{60};

 private:
  ServerCredentials() = default;
  Result<std::shared_ptr<SSL_CTX>> load();
  bool stale();
  std::string file_stamp() const;

  Source source_;
  bool ca_created_ = false;
  std::mutex mu_;
  std::shared_ptr<SSL_CTX> ctx_;                      // guarded by mu_
  std::chrono::seconds cert_left_{0};                 // auto: time left on the server cert at load
  time_t loaded_at_ = 0;                              // guarded by mu_
  std::string stamp_;                                 // given files: their identity at load
  std::chrono::steady_clock::time_point next_check_;  // guarded by mu_
};

}  // namespace space::tls

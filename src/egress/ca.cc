// The per-sandbox CA with OpenSSL 3: EC P-256 keys, X.509 v3 certificates signed with
// ECDSA-SHA256, built with the helpers of tls/x509.h (which also makes the TLS server context
// the gateway terminates intercepted connections with).
#include "egress/ca.h"

#include <openssl/crypto.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <string_view>
#include <system_error>

namespace space::egress {
namespace {

namespace fs = std::filesystem;

constexpr auto kMaxLifetime = std::chrono::hours(24 * 365 * 20);
constexpr size_t kMaxCommonName = 64;      // ub-common-name (RFC 5280)
constexpr size_t kMaxCachedLeaves = 4096;  // hosts come from policy; this only bounds memory

}  // namespace

Result<std::unique_ptr<SandboxCa>> SandboxCa::create(const std::string& sandbox_id,
                                                     std::chrono::seconds lifetime) {
  std::string cn = "SPACE sandbox " + sandbox_id + " CA";
  auto ctx = "creating the CA of sandbox " + sandbox_id;
  if (sandbox_id.empty() || cn.size() > kMaxCommonName) {
    return fail(Code::kInvalidArgument,
                ctx + ": the id must be 1.." + std::to_string(kMaxCommonName - 17) + " bytes");
  }
  if (lifetime <= std::chrono::seconds(0) || lifetime > kMaxLifetime) {
    return fail(Code::kInvalidArgument, ctx + ": lifetime must be positive and under 20 years");
  }
  tls::PkeyPtr key = TRY_CTX(tls::new_p256_key(), ctx);
  time_t now = std::time(nullptr);
  tls::X509Ptr cert = TRY_CTX(tls::new_cert(key.get(), now), ctx);
  if (!ASN1_TIME_set(X509_getm_notAfter(cert.get()), now + lifetime.count())) {
    return fail(tls::ossl_error("setting notAfter").wrap(ctx));
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  TRY_VOID_CTX(tls::add_name_entry(name, "O", "SPACE"), ctx);
  TRY_VOID_CTX(tls::add_name_entry(name, "CN", cn), ctx);
  if (!X509_set_issuer_name(cert.get(), name)) {
    return fail(tls::ossl_error("X509_set_issuer_name").wrap(ctx));
  }
  TRY_VOID_CTX(
      tls::add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
      ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"),
               ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash"), ctx);
  TRY_VOID_CTX(tls::sign(cert.get(), key.get()), ctx);

  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  ca->ca_.key = std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free);
  ca->ca_.cert = std::shared_ptr<X509>(cert.release(), X509_free);
  return ca;
}

Result<void> SandboxCa::save(const std::filesystem::path& dir) const {
  std::string ctx = "saving the sandbox CA to " + dir.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Error::sys("mkdir", dir.string(), ec.value()).wrap(ctx));

  std::string key = tls::key_pem(ca_.key.get());
  if (key.empty()) return fail(tls::ossl_error("encoding the key as PKCS#8 PEM").wrap(ctx));
  auto written = tls::write_file_atomic(dir / "ca.key", key, 0600);
  OPENSSL_cleanse(key.data(), key.size());
  TRY_VOID_CTX(std::move(written), ctx);
  std::string pem = cert_pem();
  if (pem.empty()) return fail(tls::ossl_error("encoding the certificate as PEM").wrap(ctx));
  TRY_VOID_CTX(tls::write_file_atomic(dir / "ca.crt", pem, 0644), ctx);
  return {};
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::load(const std::filesystem::path& dir) {
  std::string ctx = "loading the sandbox CA from " + dir.string();
  std::string key_pem = TRY_CTX(tls::read_small_file(dir / "ca.key", true), ctx);
  std::string crt_pem = TRY_CTX(tls::read_small_file(dir / "ca.crt", false), ctx);
  return TRY_CTX(from_pem(std::move(key_pem), crt_pem), ctx);
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::from_pem(std::string key_pem,
                                                       const std::string& crt_pem) {
  tls::PkeyPtr key = TRY_CTX(tls::parse_key_pem(std::move(key_pem)), "ca.key");
  auto certs = TRY_CTX(tls::parse_certs_pem(crt_pem), "ca.crt");
  tls::X509Ptr cert(X509_dup(certs.front().get()));
  if (!cert) return fail(tls::ossl_error("X509_dup"));
  if (!EVP_PKEY_is_a(key.get(), "EC")) {
    return fail(Code::kInvalidArgument, "ca.key is not an EC key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return fail(tls::ossl_error("ca.key does not match ca.crt", Code::kInvalidArgument));
  }
  if (X509_check_ca(cert.get()) < 1) {
    return fail(Code::kInvalidArgument, "ca.crt is not a CA certificate");
  }
  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  ca->ca_.key = std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free);
  ca->ca_.cert = std::shared_ptr<X509>(cert.release(), X509_free);
  return ca;
}

std::string SandboxCa::key_pem() const { return tls::key_pem(ca_.key.get()); }

std::string SandboxCa::cert_pem() const { return tls::cert_pem(ca_.cert.get()); }

Result<KeyCert> SandboxCa::leaf(const std::string& host) {
  {
    std::lock_guard lock(mu_);
    if (auto it = leaves_.find(host); it != leaves_.end()) return it->second;
  }
  std::string ctx = "minting a certificate for " + host;
  if (!tls::is_ip_address(host) && !tls::is_normalized_dns_name(host)) {
    return fail(Code::kInvalidArgument, ctx + ": not a normalized DNS name or an IP address");
  }
  X509* ca_cert = ca_.cert.get();
  if (X509_cmp_current_time(X509_get0_notAfter(ca_cert)) <= 0) {
    return fail(Code::kUnavailable, ctx + ": the sandbox CA has expired");
  }

  tls::PkeyPtr key = TRY_CTX(tls::new_p256_key(), ctx);
  tls::X509Ptr cert = TRY_CTX(tls::new_cert(key.get(), std::time(nullptr)), ctx);
  if (!X509_set1_notAfter(cert.get(), X509_get0_notAfter(ca_cert))) {
    return fail(tls::ossl_error("setting notAfter").wrap(ctx));
  }
  bool has_cn = host.size() <= kMaxCommonName;
  if (has_cn) TRY_VOID_CTX(tls::add_name_entry(X509_get_subject_name(cert.get()), "CN", host), ctx);
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert))) {
    return fail(tls::ossl_error("X509_set_issuer_name").wrap(ctx));
  }
  TRY_VOID_CTX(tls::add_ext(cert.get(), ca_cert, NID_basic_constraints, "critical,CA:FALSE"), ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), ca_cert, NID_key_usage, "critical,digitalSignature"), ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), ca_cert, NID_ext_key_usage, "serverAuth"), ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), ca_cert, NID_subject_key_identifier, "hash"), ctx);
  TRY_VOID_CTX(tls::add_ext(cert.get(), ca_cert, NID_authority_key_identifier, "keyid:always"),
               ctx);
  // With an empty subject the name lives only in subjectAltName, which must then be critical
  // (RFC 5280 §4.2.1.6).
  TRY_VOID_CTX(tls::add_subject_alt_names(cert.get(), {host}, !has_cn), ctx);
  TRY_VOID_CTX(tls::sign(cert.get(), ca_.key.get()), ctx);

  KeyCert kc{std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free),
             std::shared_ptr<X509>(cert.release(), X509_free)};
  std::lock_guard lock(mu_);
  if (leaves_.size() >= kMaxCachedLeaves) leaves_.clear();
  // Another thread may have minted one meanwhile: keep the first, so a host has one leaf.
  return leaves_.emplace(host, std::move(kc)).first->second;
}

}  // namespace space::egress

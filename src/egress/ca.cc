// The per-sandbox CA with OpenSSL 3: EC P-256 keys, X.509 v3 certificates signed with
// ECDSA-SHA256, and the TLS server context the gateway terminates intercepted connections with.
// Every OpenSSL object is owned by a unique_ptr (or a shared_ptr once handed out) so no error
// path leaks; every OpenSSL failure becomes an Error carrying OpenSSL's own error strings.
// The leaf's subjectAltName is built as a structure, never through OpenSSL's "DNS:..." config
// syntax, so a host name can never smuggle in a second name.
#include "egress/ca.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <string_view>
#include <system_error>

#include "common/fd.h"

namespace space::egress {
namespace {

namespace fs = std::filesystem;

template <auto F>
struct Free {
  template <class T>
  void operator()(T* p) const {
    F(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Free<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Free<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Free<BN_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Free<X509_EXTENSION_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Free<GENERAL_NAMES_free>>;
using GenNamePtr = std::unique_ptr<GENERAL_NAME, Free<GENERAL_NAME_free>>;
using Ia5Ptr = std::unique_ptr<ASN1_IA5STRING, Free<ASN1_IA5STRING_free>>;
using OctetPtr = std::unique_ptr<ASN1_OCTET_STRING, Free<ASN1_OCTET_STRING_free>>;
using CtxPtr = std::unique_ptr<SSL_CTX, Free<SSL_CTX_free>>;

constexpr auto kBackdate = std::chrono::hours(1);
constexpr auto kMaxLifetime = std::chrono::hours(24 * 365 * 20);
constexpr size_t kMaxCommonName = 64;  // ub-common-name (RFC 5280)
constexpr size_t kMaxPemFile = 64 * 1024;
constexpr size_t kMaxCachedLeaves = 4096;  // hosts come from policy; this only bounds memory

// An Error for a failed OpenSSL call, with (and clearing) OpenSSL's error queue.
Error ossl_error(std::string_view what, Code code = Code::kInternal) {
  std::string m(what);
  std::string details;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!details.empty()) details += "; ";
    details += buf;
  }
  m += ": ";
  m += details.empty() ? "no OpenSSL error recorded" : details;
  return Error(code, std::move(m));
}
std::unexpected<Error> fail_ossl(std::string_view what, Code code = Code::kInternal) {
  return std::unexpected(ossl_error(what, code));
}

Result<PkeyPtr> new_p256_key() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return fail_ossl("generating a P-256 key");
  return key;
}

// A random positive 128-bit serial number (RFC 5280 §4.1.2.2: at most 20 octets, positive).
Result<void> set_random_serial(X509* cert) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) return fail_ossl("RAND_bytes for the serial");
  raw[0] &= 0x7F;
  raw[0] |= 0x01;  // never zero, always 16 bytes long
  BnPtr bn(BN_bin2bn(raw, sizeof raw, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert))) {
    return fail_ossl("setting the serial number");
  }
  return {};
}

Result<void> add_name_entry(X509_NAME* name, const char* field, const std::string& value) {
  if (!X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(value.data()),
                                  static_cast<int>(value.size()), -1, 0)) {
    return fail_ossl(std::string("setting ") + field + "=" + value);
  }
  return {};
}

// Adds an extension given in OpenSSL's config syntax; only ever called with constant values.
Result<void> add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || !X509_add_ext(cert, ext.get(), -1)) {
    return fail_ossl(std::string("adding extension ") + OBJ_nid2sn(nid) + " = " + value);
  }
  return {};
}

// The fields every certificate here shares: v3, random serial, names, key, notBefore.
Result<X509Ptr> new_cert(EVP_PKEY* key, time_t now) {
  X509Ptr cert(X509_new());
  if (!cert) return fail_ossl("X509_new");
  if (!X509_set_version(cert.get(), X509_VERSION_3)) return fail_ossl("X509_set_version");
  TRY_VOID(set_random_serial(cert.get()));
  if (!ASN1_TIME_set(X509_getm_notBefore(cert.get()),
                     now - std::chrono::seconds(kBackdate).count())) {
    return fail_ossl("setting notBefore");
  }
  if (!X509_set_pubkey(cert.get(), key)) return fail_ossl("X509_set_pubkey");
  return cert;
}

Result<void> sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return fail_ossl("signing the certificate");
  return {};
}

// A normalized DNS name: lower-case LDH labels (underscore tolerated, as some hosts use it),
// 1..63 bytes each, at most 253 in all, no trailing dot, no wildcard.
bool is_normalized_dns_name(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t label = 0;
  for (char c : host) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok || ++label > 63) return false;
  }
  return label != 0;
}

// subjectAltName with the single name `host`: IP:<addr> for an address, DNS:<host> otherwise.
Result<void> add_subject_alt_name(X509* cert, const std::string& host, bool critical) {
  GenNamePtr gn(GENERAL_NAME_new());
  if (!gn) return fail_ossl("GENERAL_NAME_new");
  unsigned char addr[16];
  int addr_len = 0;
  if (inet_pton(AF_INET, host.c_str(), addr) == 1) {
    addr_len = 4;
  } else if (inet_pton(AF_INET6, host.c_str(), addr) == 1) {
    addr_len = 16;
  }
  if (addr_len > 0) {
    OctetPtr ip(ASN1_OCTET_STRING_new());
    if (!ip || !ASN1_OCTET_STRING_set(ip.get(), addr, addr_len)) {
      return fail_ossl("building the IP subjectAltName");
    }
    GENERAL_NAME_set0_value(gn.get(), GEN_IPADD, ip.release());
  } else {
    Ia5Ptr dns(ASN1_IA5STRING_new());
    if (!dns || !ASN1_STRING_set(dns.get(), host.data(), static_cast<int>(host.size()))) {
      return fail_ossl("building the DNS subjectAltName");
    }
    GENERAL_NAME_set0_value(gn.get(), GEN_DNS, dns.release());
  }
  NamesPtr names(sk_GENERAL_NAME_new_null());
  if (!names || !sk_GENERAL_NAME_push(names.get(), gn.get())) {
    return fail_ossl("building subjectAltName");
  }
  gn.release();  // owned by `names` now
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), critical ? 1 : 0,
                        X509V3_ADD_DEFAULT) != 1) {
    return fail_ossl("adding subjectAltName");
  }
  return {};
}

// Writes `data` to `path` atomically: a temporary file with `mode`, then rename. Not fsync'ed:
// a sandbox CA must outlive spaced's process (a restarted spaced reattaches the sandbox and
// loads it), not the host, since a sandbox does not survive a host crash either; the four
// fsyncs cost more than the rest of sandbox creation together.
Result<void> write_file_atomic(const fs::path& path, const char* data, size_t len, mode_t mode) {
  fs::path tmp = path;
  tmp += ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return fail_sys("unlink", tmp.string());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return fail_sys("open", tmp.string());
  auto cleanup_fail = [&](Error e) {
    ::unlink(tmp.c_str());
    return std::unexpected(std::move(e));
  };
  if (::fchmod(fd.get(), mode) != 0) return cleanup_fail(Error::sys("fchmod", tmp.string()));
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::write(fd.get(), data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cleanup_fail(Error::sys("write", tmp.string()));
    done += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) return cleanup_fail(Error::sys("close", tmp.string()));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return cleanup_fail(Error::sys("rename", tmp.string() + " -> " + path.string()));
  }
  return {};
}

// Reads a small regular file. With `private_file`, refuses one that group or others can read.
Result<std::string> read_small_file(const fs::path& path, bool private_file) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail_sys("open", path.string());
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", path.string());
  if (!S_ISREG(st.st_mode)) return fail(Code::kInvalidArgument, path.string() + ": not a file");
  if (private_file && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return fail(Code::kPermissionDenied,
                path.string() + ": private key readable by group or others (mode " + mode + ")");
  }
  if (static_cast<size_t>(st.st_size) > kMaxPemFile) {
    return fail(Code::kInvalidArgument, path.string() + ": larger than 64 KiB");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", path.string());
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

// PEM parsing never prompts for a passphrase: an encrypted key is an error.
int no_passphrase(char*, int, int, void*) { return 0; }

// ALPN: the gateway speaks HTTP/1.1 only. Picks "http/1.1" if the client offers it; otherwise
// acknowledges no protocol (a client offering only h2 then fails or falls back, its choice).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void*) {
  static constexpr std::string_view kHttp11 = "http/1.1";
  unsigned int pos = 0;
  while (pos < inlen) {
    unsigned int len = in[pos];
    if (len == 0 || len > inlen - pos - 1) return SSL_TLSEXT_ERR_ALERT_FATAL;  // malformed
    std::string_view proto(reinterpret_cast<const char*>(in + pos + 1), len);
    if (proto == kHttp11) {
      *out = in + pos + 1;
      *outlen = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    pos += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

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
  PkeyPtr key = TRY_CTX(new_p256_key(), ctx);
  time_t now = std::time(nullptr);
  X509Ptr cert = TRY_CTX(new_cert(key.get(), now), ctx);
  if (!ASN1_TIME_set(X509_getm_notAfter(cert.get()), now + lifetime.count())) {
    return fail(ossl_error("setting notAfter").wrap(ctx));
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  TRY_VOID_CTX(add_name_entry(name, "O", "SPACE"), ctx);
  TRY_VOID_CTX(add_name_entry(name, "CN", cn), ctx);
  if (!X509_set_issuer_name(cert.get(), name)) {
    return fail(ossl_error("X509_set_issuer_name").wrap(ctx));
  }
  TRY_VOID_CTX(add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"),
               ctx);
  TRY_VOID_CTX(add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"), ctx);
  TRY_VOID_CTX(add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash"), ctx);
  TRY_VOID_CTX(sign(cert.get(), key.get()), ctx);

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

  // A secure-memory BIO: its buffer is wiped when freed (and lives in OpenSSL's secure heap
  // when the process set one up).
  BioPtr key_bio(BIO_new(BIO_s_secmem()));
  if (!key_bio || !PEM_write_bio_PrivateKey(key_bio.get(), ca_.key.get(), nullptr, nullptr, 0,
                                            nullptr, nullptr)) {
    return fail(ossl_error("encoding the key as PKCS#8 PEM").wrap(ctx));
  }
  char* key_data = nullptr;
  long key_len = BIO_get_mem_data(key_bio.get(), &key_data);
  TRY_VOID_CTX(write_file_atomic(dir / "ca.key", key_data, static_cast<size_t>(key_len), 0600),
               ctx);
  std::string pem = cert_pem();
  if (pem.empty()) return fail(ossl_error("encoding the certificate as PEM").wrap(ctx));
  TRY_VOID_CTX(write_file_atomic(dir / "ca.crt", pem.data(), pem.size(), 0644), ctx);
  return {};
}

Result<std::unique_ptr<SandboxCa>> SandboxCa::load(const std::filesystem::path& dir) {
  std::string ctx = "loading the sandbox CA from " + dir.string();
  std::string key_pem = TRY_CTX(read_small_file(dir / "ca.key", true), ctx);
  std::string crt_pem = TRY_CTX(read_small_file(dir / "ca.crt", false), ctx);

  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  PkeyPtr key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr)
                      : nullptr);
  OPENSSL_cleanse(key_pem.data(), key_pem.size());
  if (!key) return fail(ossl_error("parsing ca.key", Code::kInvalidArgument).wrap(ctx));
  BioPtr cert_bio(BIO_new_mem_buf(crt_pem.data(), static_cast<int>(crt_pem.size())));
  X509Ptr cert(cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, no_passphrase, nullptr)
                        : nullptr);
  if (!cert) return fail(ossl_error("parsing ca.crt", Code::kInvalidArgument).wrap(ctx));

  if (!EVP_PKEY_is_a(key.get(), "EC")) {
    return fail(Code::kInvalidArgument, ctx + ": ca.key is not an EC key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return fail(ossl_error("ca.key does not match ca.crt", Code::kInvalidArgument).wrap(ctx));
  }
  if (X509_check_ca(cert.get()) < 1) {
    return fail(Code::kInvalidArgument, ctx + ": ca.crt is not a CA certificate");
  }
  std::unique_ptr<SandboxCa> ca(new SandboxCa());
  ca->ca_.key = std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free);
  ca->ca_.cert = std::shared_ptr<X509>(cert.release(), X509_free);
  return ca;
}

std::string SandboxCa::cert_pem() const {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || !PEM_write_bio_X509(bio.get(), ca_.cert.get())) return {};
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

Result<KeyCert> SandboxCa::leaf(const std::string& host) {
  {
    std::lock_guard lock(mu_);
    if (auto it = leaves_.find(host); it != leaves_.end()) return it->second;
  }
  std::string ctx = "minting a certificate for " + host;
  unsigned char addr[16];
  bool is_ip =
      inet_pton(AF_INET, host.c_str(), addr) == 1 || inet_pton(AF_INET6, host.c_str(), addr) == 1;
  if (!is_ip && !is_normalized_dns_name(host)) {
    return fail(Code::kInvalidArgument, ctx + ": not a normalized DNS name or an IP address");
  }
  X509* ca_cert = ca_.cert.get();
  if (X509_cmp_current_time(X509_get0_notAfter(ca_cert)) <= 0) {
    return fail(Code::kUnavailable, ctx + ": the sandbox CA has expired");
  }

  PkeyPtr key = TRY_CTX(new_p256_key(), ctx);
  X509Ptr cert = TRY_CTX(new_cert(key.get(), std::time(nullptr)), ctx);
  if (!X509_set1_notAfter(cert.get(), X509_get0_notAfter(ca_cert))) {
    return fail(ossl_error("setting notAfter").wrap(ctx));
  }
  bool has_cn = host.size() <= kMaxCommonName;
  if (has_cn) TRY_VOID_CTX(add_name_entry(X509_get_subject_name(cert.get()), "CN", host), ctx);
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert))) {
    return fail(ossl_error("X509_set_issuer_name").wrap(ctx));
  }
  TRY_VOID_CTX(add_ext(cert.get(), ca_cert, NID_basic_constraints, "critical,CA:FALSE"), ctx);
  TRY_VOID_CTX(add_ext(cert.get(), ca_cert, NID_key_usage, "critical,digitalSignature"), ctx);
  TRY_VOID_CTX(add_ext(cert.get(), ca_cert, NID_ext_key_usage, "serverAuth"), ctx);
  TRY_VOID_CTX(add_ext(cert.get(), ca_cert, NID_subject_key_identifier, "hash"), ctx);
  TRY_VOID_CTX(add_ext(cert.get(), ca_cert, NID_authority_key_identifier, "keyid:always"), ctx);
  // With an empty subject the name lives only in subjectAltName, which must then be critical
  // (RFC 5280 §4.2.1.6).
  TRY_VOID_CTX(add_subject_alt_name(cert.get(), host, !has_cn), ctx);
  TRY_VOID_CTX(sign(cert.get(), ca_.key.get()), ctx);

  KeyCert kc{std::shared_ptr<EVP_PKEY>(key.release(), EVP_PKEY_free),
             std::shared_ptr<X509>(cert.release(), X509_free)};
  std::lock_guard lock(mu_);
  if (leaves_.size() >= kMaxCachedLeaves) leaves_.clear();
  // Another thread may have minted one meanwhile: keep the first, so a host has one leaf.
  return leaves_.emplace(host, std::move(kc)).first->second;
}

Result<std::shared_ptr<SSL_CTX>> server_context(const KeyCert& kc) {
  constexpr std::string_view ctx = "building the TLS server context";
  if (!kc.key || !kc.cert) return fail(Code::kInvalidArgument, std::string(ctx) + ": no key");
  CtxPtr ssl_ctx(SSL_CTX_new(TLS_server_method()));
  if (!ssl_ctx) return fail(ossl_error("SSL_CTX_new").wrap(ctx));
  if (!SSL_CTX_set_min_proto_version(ssl_ctx.get(), TLS1_2_VERSION)) {
    return fail(ossl_error("setting TLS 1.2 as the minimum").wrap(ctx));
  }
  SSL_CTX_set_options(ssl_ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                         SSL_OP_NO_COMPRESSION);
  if (SSL_CTX_use_certificate(ssl_ctx.get(), kc.cert.get()) != 1) {
    return fail(ossl_error("SSL_CTX_use_certificate").wrap(ctx));
  }
  if (SSL_CTX_use_PrivateKey(ssl_ctx.get(), kc.key.get()) != 1) {
    return fail(ossl_error("SSL_CTX_use_PrivateKey").wrap(ctx));
  }
  if (SSL_CTX_check_private_key(ssl_ctx.get()) != 1) {
    return fail(ossl_error("the key does not match the certificate").wrap(ctx));
  }
  SSL_CTX_set_alpn_select_cb(ssl_ctx.get(), select_alpn, nullptr);
  return std::shared_ptr<SSL_CTX>(ssl_ctx.release(), SSL_CTX_free);
}

}  // namespace space::egress

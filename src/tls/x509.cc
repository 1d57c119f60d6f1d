// Certificate, key and PEM helpers over OpenSSL 3 (see x509.h).
#include "tls/x509.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/fd.h"

namespace space::tls {
namespace {

namespace fs = std::filesystem;

using BioPtr = std::unique_ptr<BIO, Free<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Free<BN_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Free<X509_EXTENSION_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Free<GENERAL_NAMES_free>>;
using GenNamePtr = std::unique_ptr<GENERAL_NAME, Free<GENERAL_NAME_free>>;
using Ia5Ptr = std::unique_ptr<ASN1_IA5STRING, Free<ASN1_IA5STRING_free>>;
using OctetPtr = std::unique_ptr<ASN1_OCTET_STRING, Free<ASN1_OCTET_STRING_free>>;

constexpr auto kBackdate = std::chrono::hours(1);
constexpr size_t kMaxPemFile = 64 * 1024;

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

// PEM parsing never prompts for a passphrase: an encrypted key is an error.
int no_passphrase(char*, int, int, void*) { return 0; }

// ALPN: spaced speaks HTTP/1.1 only. Picks "http/1.1" if the client offers it; otherwise
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

Error ossl_error(std::string_view what, Code code) {
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

Result<PkeyPtr> new_p256_key() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return fail_ossl("generating a P-256 key");
  return key;
}

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

Result<void> add_name_entry(X509_NAME* name, const char* field, const std::string& value) {
  if (!X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(value.data()),
                                  static_cast<int>(value.size()), -1, 0)) {
    return fail_ossl(std::string("setting ") + field + "=" + value);
  }
  return {};
}

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

Result<void> add_subject_alt_names(X509* cert, const std::vector<std::string>& names,
                                   bool critical) {
  NamesPtr gens(sk_GENERAL_NAME_new_null());
  if (!gens) return fail_ossl("building subjectAltName");
  for (const std::string& host : names) {
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
      if (!is_normalized_dns_name(host)) {
        return fail(Code::kInvalidArgument,
                    "\"" + host.substr(0, 100) + "\" is not a DNS name or an IP address");
      }
      Ia5Ptr dns(ASN1_IA5STRING_new());
      if (!dns || !ASN1_STRING_set(dns.get(), host.data(), static_cast<int>(host.size()))) {
        return fail_ossl("building the DNS subjectAltName");
      }
      GENERAL_NAME_set0_value(gn.get(), GEN_DNS, dns.release());
    }
    if (!sk_GENERAL_NAME_push(gens.get(), gn.get())) return fail_ossl("building subjectAltName");
    gn.release();  // owned by `gens` now
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, gens.get(), critical ? 1 : 0,
                        X509V3_ADD_DEFAULT) != 1) {
    return fail_ossl("adding subjectAltName");
  }
  return {};
}

std::vector<std::string> subject_alt_names(X509* cert) {
  std::vector<std::string> out;
  NamesPtr gens(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!gens) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(gens.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(gens.get(), i);
    if (gn->type == GEN_DNS) {
      const ASN1_IA5STRING* s = gn->d.dNSName;
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                       static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (gn->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = gn->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = "";
      int len = ASN1_STRING_length(s);
      if (len == 4 || len == 16) {
        inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text, sizeof text);
        out.emplace_back(text);
      }
    }
  }
  return out;
}

Result<void> sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return fail_ossl("signing the certificate");
  return {};
}

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

bool is_ip_address(const std::string& host) {
  unsigned char addr[16];
  return inet_pton(AF_INET, host.c_str(), addr) == 1 ||
         inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

std::string cert_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || !PEM_write_bio_X509(bio.get(), cert)) return {};
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

std::string key_pem(EVP_PKEY* key) {
  // A secure-memory BIO: its buffer is wiped when freed (and lives in OpenSSL's secure heap
  // when the process set one up).
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (!bio || !PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr))
    return {};
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

Result<PkeyPtr> parse_key_pem(std::string pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr) : nullptr);
  OPENSSL_cleanse(pem.data(), pem.size());
  if (!key) {
    return fail_ossl("not a PEM private key without a passphrase", Code::kInvalidArgument);
  }
  return key;
}

Result<std::vector<std::shared_ptr<X509>>> parse_certs_pem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return fail_ossl("BIO_new_mem_buf");
  std::vector<std::shared_ptr<X509>> out;
  for (;;) {
    X509* c = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr);
    if (c == nullptr) break;
    out.emplace_back(c, X509_free);
  }
  ERR_clear_error();  // the read past the last certificate fails with "no start line"
  if (out.empty()) {
    return fail(Code::kInvalidArgument, "no PEM certificate (\"-----BEGIN CERTIFICATE-----\")");
  }
  return out;
}

Result<void> write_file_atomic(const fs::path& path, std::string_view data, mode_t mode) {
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
  while (done < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
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

Result<std::string> read_small_file(const fs::path& path, bool private_file, bool follow,
                                    bool own_group_ok) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW)));
  if (!fd) return fail_sys("open", path.string());
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", path.string());
  if (!S_ISREG(st.st_mode)) return fail(Code::kInvalidArgument, path.string() + ": not a file");
  // Readable by others: refused. Readable by its group: refused unless `own_group_ok` (the
  // operator's files) and the group is one this process is in (the group a Kubernetes fsGroup
  // gives a Secret volume, Debian's ssl-cert), which grants nobody else anything.
  auto own_group = [&] {
    if (st.st_gid == ::getegid()) return true;
    gid_t groups[256];
    int n = ::getgroups(256, groups);
    for (int i = 0; i < n; ++i)
      if (groups[i] == st.st_gid) return true;
    return false;
  };
  if (private_file &&
      ((st.st_mode & 007) != 0 || ((st.st_mode & 070) != 0 && !(own_group_ok && own_group())))) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return fail(Code::kPermissionDenied, path.string() +
                                             ": private key readable by group or others (mode " +
                                             mode + "); chmod 600 it");
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

Result<std::shared_ptr<SSL_CTX>> server_context(const KeyCert& kc,
                                                const std::filesystem::path& client_ca) {
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
  for (const auto& c : kc.chain) {
    if (SSL_CTX_add1_chain_cert(ssl_ctx.get(), c.get()) != 1) {
      return fail(ossl_error("SSL_CTX_add1_chain_cert").wrap(ctx));
    }
  }
  if (SSL_CTX_use_PrivateKey(ssl_ctx.get(), kc.key.get()) != 1) {
    return fail(ossl_error("SSL_CTX_use_PrivateKey").wrap(ctx));
  }
  if (SSL_CTX_check_private_key(ssl_ctx.get()) != 1) {
    return fail(
        ossl_error("the key does not match the certificate", Code::kInvalidArgument).wrap(ctx));
  }
  SSL_CTX_set_alpn_select_cb(ssl_ctx.get(), select_alpn, nullptr);
  if (!client_ca.empty()) {
    // The CA file is read whole and checked first so that a wrong path says which file.
    std::error_code ec;
    if (!std::filesystem::is_regular_file(client_ca, ec)) {
      return fail(Code::kInvalidArgument,
                  std::string(ctx) + ": client_ca " + client_ca.string() +
                      " is not a readable file; give the cluster CA's certificate (PEM)");
    }
    if (SSL_CTX_load_verify_locations(ssl_ctx.get(), client_ca.c_str(), nullptr) != 1) {
      return fail(
          ossl_error("reading client_ca " + client_ca.string(), Code::kInvalidArgument).wrap(ctx));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str());
    if (names == nullptr) {
      return fail(
          ossl_error("no CA certificate in client_ca " + client_ca.string(), Code::kInvalidArgument)
              .wrap(ctx));
    }
    SSL_CTX_set_client_CA_list(ssl_ctx.get(), names);
    SSL_CTX_set_verify(ssl_ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    SSL_CTX_set_verify_depth(ssl_ctx.get(), 4);
  }
  return std::shared_ptr<SSL_CTX>(ssl_ctx.release(), SSL_CTX_free);
}

std::chrono::seconds time_left(X509* cert, time_t now) {
  int days = 0, secs = 0;
  ASN1_TIME* t = ASN1_TIME_set(nullptr, now);
  bool ok = t != nullptr && ASN1_TIME_diff(&days, &secs, t, X509_get0_notAfter(cert)) == 1;
  ASN1_TIME_free(t);
  if (!ok) return std::chrono::seconds(-1);
  return std::chrono::seconds(int64_t{days} * 86400 + secs);
}

}  // namespace space::tls

// Tests for the per-sandbox CA (src/egress/ca.cc): certificates are checked the way a client
// checks them (X509_verify_cert against a store holding only the sandbox's CA, strict X.509
// checks, host and IP matching), the negative cases assert that a leaf does not verify where
// it must not, the key file round-trips with mode 0600, and a full TLS handshake in memory
// proves the server context works with a client that trusts only the sandbox CA.
#include "egress/ca.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "../temp_dir.h"

namespace space::egress {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

// A temporary directory, removed with everything in it.
struct TempDir : test_support::TempDir {
  TempDir() : test_support::TempDir("space-ca-test") {}
};

// The error code of a result that must have failed.
template <class T>
std::optional<Code> error_code(const Result<T>& r) {
  if (r) return std::nullopt;
  return r.error().code();
}

std::unique_ptr<SandboxCa> make_ca(const std::string& id = "sb_test1") {
  auto ca = SandboxCa::create(id, hours(24));
  EXPECT_TRUE(ca) << ca.error().message();
  return ca ? std::move(*ca) : nullptr;
}

struct VerifyOpts {
  std::string host;
  std::string ip;
};

// X509_verify_cert of `leaf` against a store holding only `root`, strict, for the TLS server
// purpose; returns the verify error (X509_V_OK on success).
int verify(X509* root, X509* leaf, const VerifyOpts& opts) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  EXPECT_EQ(X509_STORE_add_cert(store.get(), root), 1);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  EXPECT_EQ(X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr), 1);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (!opts.host.empty()) {
    EXPECT_EQ(X509_VERIFY_PARAM_set1_host(param, opts.host.c_str(), 0), 1);
  }
  if (!opts.ip.empty()) {
    EXPECT_EQ(X509_VERIFY_PARAM_set1_ip_asc(param, opts.ip.c_str()), 1);
  }
  int ok = X509_verify_cert(ctx.get());
  int err = X509_STORE_CTX_get_error(ctx.get());
  EXPECT_EQ(ok == 1, err == X509_V_OK);
  return err;
}

std::string subject(X509* cert) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return len > 0 ? std::string(data, static_cast<size_t>(len)) : std::string();
}

bool ext_critical(X509* cert, int nid) {
  int idx = X509_get_ext_by_NID(cert, nid, -1);
  EXPECT_GE(idx, 0) << OBJ_nid2sn(nid);
  return idx >= 0 && X509_EXTENSION_get_critical(X509_get_ext(cert, idx)) == 1;
}

TEST(SandboxCa, CaCertificateShape) {
  auto ca = make_ca("sb_shape");
  ASSERT_TRUE(ca);
  X509* cert = ca->ca().cert.get();
  EXPECT_EQ(X509_get_version(cert), X509_VERSION_3);
  EXPECT_EQ(subject(cert), "CN=SPACE sandbox sb_shape CA,O=SPACE");
  EXPECT_EQ(X509_NAME_cmp(X509_get_subject_name(cert), X509_get_issuer_name(cert)), 0);
  EXPECT_EQ(X509_check_ca(cert), 1);
  EXPECT_EQ(X509_get_pathlen(cert), 0);
  EXPECT_TRUE(ext_critical(cert, NID_basic_constraints));
  EXPECT_TRUE(ext_critical(cert, NID_key_usage));
  EXPECT_EQ(X509_get_key_usage(cert), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  EXPECT_NE(X509_get0_subject_key_id(cert), nullptr);
  EXPECT_EQ(X509_get_signature_nid(cert), NID_ecdsa_with_SHA256);
  char group[64] = {};
  EXPECT_EQ(EVP_PKEY_get_group_name(ca->ca().key.get(), group, sizeof group, nullptr), 1);
  EXPECT_STREQ(group, "prime256v1");
  // Self-signed signature verifies; validity starts in the past and ends after now.
  EXPECT_EQ(X509_verify(cert, ca->ca().key.get()), 1);
  EXPECT_LT(X509_cmp_current_time(X509_get0_notBefore(cert)), 0);
  EXPECT_GT(X509_cmp_current_time(X509_get0_notAfter(cert)), 0);
  // A positive 128-bit serial, different for each CA.
  const ASN1_INTEGER* serial = X509_get0_serialNumber(cert);
  EXPECT_EQ(ASN1_STRING_length(serial), 16);
  auto other = make_ca("sb_shape");
  ASSERT_TRUE(other);
  EXPECT_NE(ASN1_INTEGER_cmp(serial, X509_get0_serialNumber(other->ca().cert.get())), 0);
}

TEST(SandboxCa, CreateRefusesBadArguments) {
  EXPECT_EQ(error_code(SandboxCa::create("", hours(1))), Code::kInvalidArgument);
  EXPECT_EQ(error_code(SandboxCa::create(std::string(60, 'x'), hours(1))), Code::kInvalidArgument);
  EXPECT_EQ(error_code(SandboxCa::create("sb", std::chrono::seconds(0))), Code::kInvalidArgument);
  EXPECT_EQ(error_code(SandboxCa::create("sb", hours(24 * 365 * 100))), Code::kInvalidArgument);
}

TEST(SandboxCa, LeafVerifiesForItsHostOnly) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto leaf = ca->leaf("api.github.com");
  ASSERT_TRUE(leaf) << leaf.error().message();
  X509* root = ca->ca().cert.get();
  X509* cert = leaf->cert.get();
  EXPECT_EQ(verify(root, cert, {.host = "api.github.com"}), X509_V_OK)
      << X509_verify_cert_error_string(verify(root, cert, {.host = "api.github.com"}));
  EXPECT_EQ(verify(root, cert, {.host = "github.com"}), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ(verify(root, cert, {.host = "evil.api.github.com"}), X509_V_ERR_HOSTNAME_MISMATCH);
  // Shape: not a CA, serverAuth only, digitalSignature, CN and SAN, expires with the CA.
  EXPECT_EQ(subject(cert), "CN=api.github.com");
  EXPECT_EQ(X509_check_ca(cert), 0);
  EXPECT_TRUE(ext_critical(cert, NID_basic_constraints));
  EXPECT_EQ(X509_get_extended_key_usage(cert), static_cast<uint32_t>(XKU_SSL_SERVER));
  EXPECT_EQ(X509_get_key_usage(cert), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_EQ(X509_get_signature_nid(cert), NID_ecdsa_with_SHA256);
  EXPECT_EQ(ASN1_TIME_compare(X509_get0_notAfter(cert), X509_get0_notAfter(root)), 0);
  const ASN1_OCTET_STRING* akid = X509_get0_authority_key_id(cert);
  ASSERT_NE(akid, nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(akid, X509_get0_subject_key_id(root)), 0);
  EXPECT_EQ(X509_check_private_key(cert, leaf->key.get()), 1);
  EXPECT_NE(EVP_PKEY_eq(leaf->key.get(), ca->ca().key.get()), 1) << "a fresh key per leaf";
}

TEST(SandboxCa, IpLeafVerifiesForItsAddress) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  X509* root = ca->ca().cert.get();
  for (const char* ip : {"10.1.2.3", "2001:db8::1"}) {
    auto leaf = ca->leaf(ip);
    ASSERT_TRUE(leaf) << leaf.error().message();
    EXPECT_EQ(verify(root, leaf->cert.get(), {.ip = ip}), X509_V_OK) << ip;
    EXPECT_EQ(verify(root, leaf->cert.get(), {.ip = "10.1.2.4"}), X509_V_ERR_IP_ADDRESS_MISMATCH);
    EXPECT_EQ(verify(root, leaf->cert.get(), {.host = "example.com"}),
              X509_V_ERR_HOSTNAME_MISMATCH);
  }
}

TEST(SandboxCa, LongHostGetsNoCommonNameAndStillVerifies) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  std::string host = std::string(60, 'a') + ".example.com";  // 72 bytes
  auto leaf = ca->leaf(host);
  ASSERT_TRUE(leaf) << leaf.error().message();
  EXPECT_EQ(subject(leaf->cert.get()), "");
  EXPECT_TRUE(ext_critical(leaf->cert.get(), NID_subject_alt_name));
  EXPECT_EQ(verify(ca->ca().cert.get(), leaf->cert.get(), {.host = host}), X509_V_OK);
}

TEST(SandboxCa, LeafOfAnotherCaDoesNotVerify) {
  auto a = make_ca("sb_a");
  auto b = make_ca("sb_b");
  ASSERT_TRUE(a && b);
  auto leaf_b = b->leaf("example.com");
  ASSERT_TRUE(leaf_b);
  EXPECT_EQ(verify(b->ca().cert.get(), leaf_b->cert.get(), {.host = "example.com"}), X509_V_OK);
  EXPECT_NE(verify(a->ca().cert.get(), leaf_b->cert.get(), {.host = "example.com"}), X509_V_OK);
  // Nor does a leaf trust chain to another sandbox's CA even with the same subject name.
  auto twin = make_ca("sb_a");
  ASSERT_TRUE(twin);
  auto leaf_twin = twin->leaf("example.com");
  ASSERT_TRUE(leaf_twin);
  EXPECT_NE(verify(a->ca().cert.get(), leaf_twin->cert.get(), {.host = "example.com"}), X509_V_OK);
}

TEST(SandboxCa, LeafRefusesHostsThatAreNotNormalized) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  std::string long_name;  // valid labels, 256 bytes in all
  for (int i = 0; i < 4; ++i) long_name += std::string(63, 'a') + ".";
  long_name += "com";
  std::vector<std::string> bad_hosts = {"",
                                        "Example.com",
                                        "a.com,DNS:evil.com",
                                        "*.example.com",
                                        "example.com.",
                                        "a..b",
                                        ".a",
                                        std::string(64, 'x') + ".com",
                                        long_name,
                                        "a b",
                                        std::string("a\0b", 3),
                                        "fe80::1%eth0",
                                        "[::1]"};
  for (const std::string& bad : bad_hosts) {
    auto leaf = ca->leaf(bad);
    ASSERT_FALSE(leaf) << bad;
    EXPECT_EQ(leaf.error().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(SandboxCa, CacheReturnsTheSameLeaf) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto first = ca->leaf("pypi.org");
  auto again = ca->leaf("pypi.org");
  auto other = ca->leaf("files.pythonhosted.org");
  ASSERT_TRUE(first && again && other);
  EXPECT_EQ(first->cert.get(), again->cert.get());
  EXPECT_EQ(first->key.get(), again->key.get());
  EXPECT_NE(first->cert.get(), other->cert.get());
  // Concurrent first requests for one host all get one certificate.
  std::vector<X509*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      auto leaf = ca->leaf("registry.npmjs.org");
      seen[i] = leaf ? leaf->cert.get() : nullptr;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(seen[0], nullptr);
  EXPECT_EQ(std::set<X509*>(seen.begin(), seen.end()).size(), 1u);
  auto later = ca->leaf("registry.npmjs.org");
  ASSERT_TRUE(later);
  EXPECT_EQ(later->cert.get(), seen[0]);
}

TEST(SandboxCa, SaveLoadRoundTrip) {
  TempDir tmp;
  fs::path dir = tmp.path() / "ca";
  auto ca = make_ca("sb_saved");
  ASSERT_TRUE(ca);
  auto saved = ca->save(dir);
  ASSERT_TRUE(saved) << saved.error().message();

  struct stat st;
  ASSERT_EQ(stat((dir / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir / "ca.crt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  std::ifstream key_file(dir / "ca.key");
  std::string first_line;
  std::getline(key_file, first_line);
  EXPECT_EQ(first_line, "-----BEGIN PRIVATE KEY-----") << "PKCS#8";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ca.crt", "ca.key"})) << "no temporary left";

  auto loaded = SandboxCa::load(dir);
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(X509_cmp((*loaded)->ca().cert.get(), ca->ca().cert.get()), 0);
  EXPECT_EQ(EVP_PKEY_eq((*loaded)->ca().key.get(), ca->ca().key.get()), 1);
  EXPECT_EQ((*loaded)->cert_pem(), ca->cert_pem());
  // The reloaded CA mints leaves the original certificate vouches for.
  auto leaf = (*loaded)->leaf("example.com");
  ASSERT_TRUE(leaf);
  EXPECT_EQ(verify(ca->ca().cert.get(), leaf->cert.get(), {.host = "example.com"}), X509_V_OK);
  // Saving again over the old files works.
  EXPECT_TRUE(ca->save(dir));
}

TEST(SandboxCa, LoadRefusesBadFiles) {
  TempDir tmp;
  EXPECT_EQ(error_code(SandboxCa::load(tmp.path() / "missing")), Code::kNotFound);
  auto a = make_ca("sb_a");
  auto b = make_ca("sb_b");
  ASSERT_TRUE(a && b);
  fs::path da = tmp.path() / "a";
  fs::path db = tmp.path() / "b";
  ASSERT_TRUE(a->save(da));
  ASSERT_TRUE(b->save(db));
  // A key others can read is refused.
  ASSERT_EQ(chmod((da / "ca.key").c_str(), 0640), 0);
  auto loose = SandboxCa::load(da);
  ASSERT_FALSE(loose);
  EXPECT_EQ(loose.error().code(), Code::kPermissionDenied);
  EXPECT_NE(loose.error().message().find("0640"), std::string::npos);
  ASSERT_EQ(chmod((da / "ca.key").c_str(), 0600), 0);
  ASSERT_TRUE(SandboxCa::load(da));
  // A key that does not match the certificate.
  fs::copy_file(db / "ca.key", da / "ca.key", fs::copy_options::overwrite_existing);
  auto mismatch = SandboxCa::load(da);
  ASSERT_FALSE(mismatch);
  EXPECT_EQ(mismatch.error().code(), Code::kInvalidArgument);
  // Garbage instead of PEM.
  { std::ofstream(db / "ca.crt") << "not a certificate\n"; }
  auto garbage = SandboxCa::load(db);
  ASSERT_FALSE(garbage);
  EXPECT_EQ(garbage.error().code(), Code::kInvalidArgument);
  EXPECT_NE(garbage.error().message().find("ca.crt"), std::string::npos);
}

TEST(SandboxCa, CertPemParses) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  std::string pem = ca->cert_pem();
  EXPECT_EQ(pem.rfind("-----BEGIN CERTIFICATE-----\n", 0), 0u);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> back(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
  ASSERT_TRUE(back);
  EXPECT_EQ(X509_cmp(back.get(), ca->ca().cert.get()), 0);
}

// --- a TLS handshake in memory ---------------------------------------------------------------

struct HandshakeResult {
  bool ok = false;
  long verify_result = -1;
  std::string alpn;
  int version = 0;
};

// Runs a handshake between a client that trusts only `trusted` and a server using `server_ctx`.
HandshakeResult handshake(SSL_CTX* server_ctx, X509* trusted, const std::string& host,
                          const std::string& alpn_wire, int client_max = 0) {
  HandshakeResult res;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> cctx(SSL_CTX_new(TLS_client_method()),
                                                         SSL_CTX_free);
  X509_STORE* store = SSL_CTX_get_cert_store(cctx.get());
  EXPECT_EQ(X509_STORE_add_cert(store, trusted), 1);
  X509_STORE_set_flags(store, X509_V_FLAG_X509_STRICT);
  SSL_CTX_set_verify(cctx.get(), SSL_VERIFY_PEER, nullptr);
  if (client_max) {
    SSL_CTX_set_min_proto_version(cctx.get(), TLS1_VERSION);
    SSL_CTX_set_max_proto_version(cctx.get(), client_max);
    SSL_CTX_set_security_level(cctx.get(), 0);  // let the old version be offered at all
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> client(SSL_new(cctx.get()), SSL_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> server(SSL_new(server_ctx), SSL_free);
  SSL_set_tlsext_host_name(client.get(), host.c_str());
  EXPECT_EQ(SSL_set1_host(client.get(), host.c_str()), 1);
  if (!alpn_wire.empty()) {
    EXPECT_EQ(
        SSL_set_alpn_protos(client.get(), reinterpret_cast<const unsigned char*>(alpn_wire.data()),
                            static_cast<unsigned>(alpn_wire.size())),
        0);
  }
  BIO* cbio = nullptr;
  BIO* sbio = nullptr;
  EXPECT_EQ(BIO_new_bio_pair(&cbio, 0, &sbio, 0), 1);
  SSL_set_bio(client.get(), cbio, cbio);
  SSL_set_bio(server.get(), sbio, sbio);
  SSL_set_connect_state(client.get());
  SSL_set_accept_state(server.get());
  bool client_done = false, server_done = false;
  for (int round = 0; round < 20 && !(client_done && server_done); ++round) {
    if (!client_done) {
      int r = SSL_do_handshake(client.get());
      if (r == 1)
        client_done = true;
      else if (SSL_get_error(client.get(), r) != SSL_ERROR_WANT_READ)
        break;
    }
    if (!server_done) {
      int r = SSL_do_handshake(server.get());
      if (r == 1)
        server_done = true;
      else if (SSL_get_error(server.get(), r) != SSL_ERROR_WANT_READ)
        break;
    }
  }
  ERR_clear_error();
  res.ok = client_done && server_done;
  res.verify_result = SSL_get_verify_result(client.get());
  const unsigned char* sel = nullptr;
  unsigned int sel_len = 0;
  SSL_get0_alpn_selected(client.get(), &sel, &sel_len);
  res.alpn.assign(reinterpret_cast<const char*>(sel), sel ? sel_len : 0);
  res.version = SSL_version(client.get());
  if (res.ok) {  // application data flows both ways
    char buf[16] = {};
    EXPECT_EQ(SSL_write(client.get(), "ping", 4), 4);
    EXPECT_EQ(SSL_read(server.get(), buf, sizeof buf), 4);
    EXPECT_EQ(std::string(buf, 4), "ping");
  }
  return res;
}

TEST(SandboxCaTls, HandshakeSelectsHttp11OverH2) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto leaf = ca->leaf("api.github.com");
  ASSERT_TRUE(leaf);
  auto sctx = server_context(*leaf);
  ASSERT_TRUE(sctx) << sctx.error().message();
  HandshakeResult r = handshake(sctx->get(), ca->ca().cert.get(), "api.github.com",
                                std::string("\x02h2\x08http/1.1", 12));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.verify_result, X509_V_OK);
  EXPECT_EQ(r.alpn, "http/1.1");
  EXPECT_EQ(r.version, TLS1_3_VERSION);
  // TLS 1.2 works too, with the same ALPN choice.
  HandshakeResult r12 = handshake(sctx->get(), ca->ca().cert.get(), "api.github.com",
                                  std::string("\x02h2\x08http/1.1", 12), TLS1_2_VERSION);
  ASSERT_TRUE(r12.ok);
  EXPECT_EQ(r12.version, TLS1_2_VERSION);
  EXPECT_EQ(r12.alpn, "http/1.1");
}

TEST(SandboxCaTls, AlpnIsOptionalAndH2OnlyGetsNoProtocol) {
  auto ca = make_ca();
  ASSERT_TRUE(ca);
  auto leaf = ca->leaf("example.com");
  ASSERT_TRUE(leaf);
  auto sctx = server_context(*leaf);
  ASSERT_TRUE(sctx);
  HandshakeResult none = handshake(sctx->get(), ca->ca().cert.get(), "example.com", "");
  EXPECT_TRUE(none.ok);
  EXPECT_EQ(none.alpn, "");
  HandshakeResult h2 =
      handshake(sctx->get(), ca->ca().cert.get(), "example.com", std::string("\x02h2", 3));
  EXPECT_TRUE(h2.ok);
  EXPECT_EQ(h2.alpn, "") << "h2 is never selected";
}

TEST(SandboxCaTls, ClientsRefuseWhatTheyMust) {
  auto ca = make_ca("sb_one");
  auto other = make_ca("sb_two");
  ASSERT_TRUE(ca && other);
  auto leaf = ca->leaf("example.com");
  ASSERT_TRUE(leaf);
  auto sctx = server_context(*leaf);
  ASSERT_TRUE(sctx);
  // A client trusting another sandbox's CA.
  HandshakeResult foreign = handshake(sctx->get(), other->ca().cert.get(), "example.com", "");
  EXPECT_FALSE(foreign.ok);
  EXPECT_NE(foreign.verify_result, X509_V_OK);
  // A client asking for another name.
  HandshakeResult wrong = handshake(sctx->get(), ca->ca().cert.get(), "example.org", "");
  EXPECT_FALSE(wrong.ok);
  EXPECT_EQ(wrong.verify_result, X509_V_ERR_HOSTNAME_MISMATCH);
  // A client that stops at TLS 1.1: the server's minimum is 1.2.
  HandshakeResult old =
      handshake(sctx->get(), ca->ca().cert.get(), "example.com", "", TLS1_1_VERSION);
  EXPECT_FALSE(old.ok);
}

TEST(SandboxCaTls, ServerContextNeedsAKey) {
  EXPECT_FALSE(server_context(KeyCert{}));
  auto a = make_ca("sb_a");
  auto b = make_ca("sb_b");
  ASSERT_TRUE(a && b);
  // A certificate with someone else's key.
  auto mixed = server_context(KeyCert{b->ca().key, a->ca().cert});
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message().find("error:"), std::string::npos)
      << "carries OpenSSL's error string: " << mixed.error().message();
}

}  // namespace
}  // namespace space::egress

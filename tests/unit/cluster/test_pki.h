// A test PKI for the cluster client's https tests: a CA and a server certificate made by
// tls::ensure_auto_certs, and a client certificate signed by the same CA (mutual TLS).
#pragma once

#include <gtest/gtest.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "tls/api_certs.h"
#include "tls/x509.h"
#include "unit/temp_dir.h"

namespace space::test_support {

struct TestPki {
  test_support::TempDir dir{"space-http-tls"};
  std::string ca_file;
  tls::KeyCert server;
  std::string client_cert, client_key;
};

// A CA and a server certificate for `names` (tls::ensure_auto_certs), and a client certificate
// signed by the same CA.
inline std::unique_ptr<TestPki> make_pki(const std::vector<std::string>& names) {
  auto p = std::make_unique<TestPki>();
  tls::AutoCertOptions o;
  o.dir = p->dir.path() / "tls";
  o.names = names;
  auto certs = tls::ensure_auto_certs(o);
  EXPECT_TRUE(certs) << (certs ? "" : certs.error().message());
  if (!certs) return p;
  p->ca_file = certs->ca_file;
  p->server = certs->server;
  auto ca_key = tls::parse_key_pem(*tls::read_small_file(o.dir / "ca.key", false));
  auto ca_cert = tls::parse_certs_pem(*tls::read_small_file(o.dir / "ca.pem", false));
  EXPECT_TRUE(ca_key && ca_cert);
  auto key = tls::new_p256_key();
  auto cert = tls::new_cert(key->get(), ::time(nullptr));
  EXPECT_TRUE(cert);
  X509_gmtime_adj(X509_getm_notAfter(cert->get()), 3600);
  EXPECT_TRUE(tls::add_name_entry(X509_get_subject_name(cert->get()), "CN", "gateway"));
  X509_set_issuer_name(cert->get(), X509_get_subject_name((*ca_cert)[0].get()));
  EXPECT_TRUE(tls::add_ext(cert->get(), (*ca_cert)[0].get(), NID_ext_key_usage, "clientAuth"));
  EXPECT_TRUE(tls::sign(cert->get(), ca_key->get()));
  p->client_cert = p->dir.path() / "client.pem";
  p->client_key = p->dir.path() / "client.key";
  EXPECT_TRUE(tls::write_file_atomic(p->client_cert, tls::cert_pem(cert->get()), 0644));
  EXPECT_TRUE(tls::write_file_atomic(p->client_key, tls::key_pem(key->get()), 0600));
  return p;
}

}  // namespace space::test_support

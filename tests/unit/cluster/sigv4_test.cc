// AWS Signature Version 4 against AWS's published examples: the SigV4 test suite's
// get-vanilla, get-vanilla-query-order-key-case and post-vanilla requests (AKIDEXAMPLE,
// 20150830T123600Z, region us-east-1, service "service"), and the S3 developer guide's signed
// GetObject, PutObject and ListObjects examples (AKIAIOSFODNN7EXAMPLE, 20130524T000000Z,
// examplebucket). Every intermediate value the examples publish is compared: the canonical
// request, the string to sign (whose last line is the canonical request's SHA-256), the
// signature and the Authorization header.
#include "cluster/sigv4.h"

#include <gtest/gtest.h>

namespace space::cluster::sigv4 {
namespace {

const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const Credentials kS3Guide{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const std::string kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(SigV4, Sha256OfNothing) { EXPECT_EQ(sha256_hex(""), kEmptySha); }

TEST(SigV4, GetVanilla) {
  Request r;
  r.method = "GET";
  r.path = "/";
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.payload_sha256 = sha256_hex("");
  Signature s = sign(r, kSuite, "20150830T123600Z", "us-east-1", "service");
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n" +
                kEmptySha);
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4, GetVanillaQueryOrderKeyCase) {
  Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.payload_sha256 = sha256_hex("");
  Signature s = sign(r, kSuite, "20150830T123600Z", "us-east-1", "service");
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
                kEmptySha);
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4, PostVanilla) {
  Request r;
  r.method = "POST";
  r.path = "/";
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.payload_sha256 = sha256_hex("");
  Signature s = sign(r, kSuite, "20150830T123600Z", "us-east-1", "service");
  EXPECT_EQ(s.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

// S3 developer guide, "Example: GET Object" (a Range header, an empty payload).
TEST(SigV4, S3GuideGetObject) {
  Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptySha},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_sha256 = kEmptySha;
  Signature s = sign(r, kS3Guide, "20130524T000000Z", "us-east-1", "s3");
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:" +
                kEmptySha +
                "\nx-amz-date:20130524T000000Z\n\n"
                "host;range;x-amz-content-sha256;x-amz-date\n" +
                kEmptySha);
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// "Example: PUT Object": a '$' in the key (percent-encoded in the path), a body, a Date header.
TEST(SigV4, S3GuidePutObject) {
  const std::string body = "Welcome to Amazon S3.";
  EXPECT_EQ(sha256_hex(body), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  Request r;
  r.method = "PUT";
  r.path = "/" + uri_encode("test$file.text", true);
  EXPECT_EQ(r.path, "/test%24file.text");
  r.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", sha256_hex(body)},
               {"x-amz-date", "20130524T000000Z"},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  r.payload_sha256 = sha256_hex(body);
  Signature s = sign(r, kS3Guide, "20130524T000000Z", "us-east-1", "s3");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// "Example: GET Bucket (List Objects)": a query, sorted by name.
TEST(SigV4, S3GuideListObjects) {
  Request r;
  r.method = "GET";
  r.path = "/";
  r.query = {{"max-keys", "2"}, {"prefix", "J"}};
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmptySha},
               {"x-amz-date", "20130524T000000Z"}};
  r.payload_sha256 = kEmptySha;
  Signature s = sign(r, kS3Guide, "20130524T000000Z", "us-east-1", "s3");
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, EncodingAndHeaderNormalization) {
  EXPECT_EQ(uri_encode("a b/c~d_e.f-g+h=i&j", false), "a%20b%2Fc~d_e.f-g%2Bh%3Di%26j");
  EXPECT_EQ(uri_encode("a b/c", true), "a%20b/c");
  EXPECT_EQ(uri_encode("\xc3\xbc", false), "%C3%BC");
  EXPECT_EQ(canonical_query({{"b", "2"}, {"a", "x y"}, {"a", "1"}, {"list-type", "2"}}),
            "a=1&a=x%20y&b=2&list-type=2");
  EXPECT_EQ(amz_date(1440938160), "20150830T123600Z");
  Request r;
  r.method = "GET";
  r.path = "";
  r.headers = {{"My-Header1", "  a   b   c  "}, {"Host", "h"}, {"my-header1", "d"}};
  r.payload_sha256 = kEmptySha;
  Signature s = sign(r, kSuite, "20150830T123600Z", "us-east-1", "service");
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:h\nmy-header1:a b c,d\n\nhost;my-header1\n" + kEmptySha);
}

}  // namespace
}  // namespace space::cluster::sigv4

// The object store's S3 back end (s3://bucket/prefix?endpoint=URL&region=REGION): path-style
// requests (endpoint/bucket/prefix/key) signed with AWS Signature V4 (sigv4.h) over the
// cluster's HTTP client (http_client.h), for AWS S3 and S3-compatible services (MinIO, Ceph
// RGW, ...). put is a single PutObject (S3 makes it visible whole or not at all), exists a
// HeadObject, list ListObjectsV2 with continuation tokens. Without endpoint= the endpoint is
// https://s3.<region>.amazonaws.com; without region= the region is us-east-1.
#pragma once

#include <memory>
#include <string>

#include "cluster/object_store.h"

namespace space::cluster {

Result<std::unique_ptr<ObjectStore>> open_s3_store(const std::string& url,
                                                   const ObjectStoreOptions& options);

// The parts of an s3:// URL (exposed for tests).
struct S3Location {
  std::string bucket;
  std::string prefix;    // "" or "a/b" (no leading or trailing '/')
  std::string endpoint;  // "http://127.0.0.1:4568"
  std::string region;
};
Result<S3Location> parse_s3_url(const std::string& url);

}  // namespace space::cluster

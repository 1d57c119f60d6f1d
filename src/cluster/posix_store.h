// The object store's POSIX back end (file:///abs/dir): each key is a file under the root
// directory, its components directories. Written for a volume several nodes mount (NFS,
// CephFS) as well as a local disk:
//   put     a temporary file beside the target (".<name>.<random>.tmp"), written, fsync()ed,
//           rename()d over the target (atomic on NFS too), then the directory fsync()ed;
//   paths   resolved one component at a time with openat(O_NOFOLLOW | O_DIRECTORY) from the
//           root's fd, so a symlink planted in the store (by anyone who can write to the
//           volume) is never followed, inside or out of the root;
//   list    walks the directories below the prefix without following symlinks, skipping
//           temporary files.
#pragma once

#include <memory>
#include <string>

#include "cluster/object_store.h"

namespace space::cluster {

// `dir`: an absolute path to an existing directory (made with mode 0700 if absent). `url`: how
// messages name the store.
Result<std::unique_ptr<ObjectStore>> open_posix_store(const std::string& dir,
                                                      const std::string& url);

}  // namespace space::cluster

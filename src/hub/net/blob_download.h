// One file of a repo into the cache's blobs/: downloaded into blobs/{etag}.incomplete (resumed
// from what is there with a Range request, across runs and across retries of a cut transfer),
// checked against the listed size and hash (sha256 for LFS files, git blob sha1 for others),
// flushed, and renamed to blobs/{etag}. A blob already present is never fetched again. The
// cache's lock file for the blob (.locks/models--org--name/{etag}.lock, flock) keeps two pulls,
// of hearth or of huggingface_hub, from writing the same blob.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "hub/hf_cache.h"
#include "hub/hub_files.h"
#include "hub/net/hub_client.h"

namespace hearth::hub {

struct DownloadEvents {
  // Bytes on disk for this file changed by `on_disk` (negative when a partial file is dropped),
  // `network` of them just received.
  std::function<void(int64_t on_disk, uint64_t network)> bytes;
  // A line worth telling the user (a retry, waiting for a lock).
  std::function<void(const std::string&)> note;
};

// Returns the bytes received over the network (0 when the blob was already there). Throws
// hearth::Error naming the file on a hash or size mismatch (the partial file is removed), an
// HTTP error answer (fail_hub_answer), a full disk, or a transport failure that retries did not
// cure.
uint64_t download_blob(HttpClient& http, const HubTarget& target, const std::string& url,
                       const RemoteFile& file, const RepoCache& repo, const DownloadEvents& events);

}  // namespace hearth::hub

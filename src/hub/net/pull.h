// `hearth pull`: a model repo's checkpoint files at one revision into the Hugging Face cache.
// The revision is resolved to a commit (repo info), the files listed with sizes and hashes (the
// tree API; per-file HEADs where a mirror lacks it), the weights the safetensors index names
// chosen, and the missing blobs fetched a few at a time (blob_download.h); then the snapshot's
// links and refs/{revision} are written, so `-m org/name` finds it offline. Blobs already in
// the cache (from any tool) are linked, not fetched.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "hub/hf_cache.h"
#include "hub/hub_files.h"

namespace hearth::hub {

struct PullOptions {
  RepoRef ref;
  FileSelection selection;
  int jobs = 4;              // files downloaded at once
  bool progress_bar = true;  // false: plain lines (stderr is not a terminal)
};

struct PullResult {
  std::string commit;
  std::filesystem::path snapshot;
  size_t n_files = 0;
  uint64_t total_bytes = 0;
  size_t n_fetched = 0;          // files that were not in the cache
  uint64_t network_bytes = 0;    // bytes received over the network
  bool from_cache_only = false;  // offline (HF_HUB_OFFLINE) or the Hub unreachable
};

// Environment: HF_ENDPOINT, HF_TOKEN (or $HF_HOME/token), HF_HUB_CACHE/HF_HOME, HF_HUB_OFFLINE.
// Throws hearth::Error with a message naming the repo, revision or file and what to do.
PullResult hub_pull(const PullOptions& options);

}  // namespace hearth::hub

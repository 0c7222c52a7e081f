#include "hub/net/pull.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "hub/net/blob_download.h"
#include "hub/net/hub_client.h"
#include "hub/net/pull_progress.h"

namespace fs = std::filesystem;

namespace hearth::hub {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// Thrown inside a download when another file's failure ends the pull.
struct Cancelled {};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bytes free for an unprivileged writer on the file system holding `dir` (or its nearest
// existing parent); nullopt when it cannot be told.
std::optional<uint64_t> free_bytes(fs::path dir) {
  std::error_code ec;
  while (!dir.empty() && !fs::exists(dir, ec)) dir = dir.parent_path();
  struct statvfs st {};
  if (dir.empty() || ::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

uint64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  return ec ? 0 : uint64_t(size);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) fail("cannot read {}", p.string());
  return ss.str();
}

// The repo's files at `commit` with sizes and blob names: from the tree API, else (a mirror
// without it) a HEAD per file of the repo info's list that the selection keeps.
std::vector<RemoteFile> list_selected_files(HubClient& client, const RepoInfo& info,
                                            const FileSelection& selection) {
  std::vector<RemoteFile> listed;
  if (client.list_files(info.commit, listed)) return select_pull_files(listed, selection);
  std::vector<RemoteFile> names;
  for (const std::string& path : info.files) {
    if (!is_safe_repo_path(path))
      fail("{}: refusing the file path '{}'", client.target().repo_id, path);
    names.push_back({path, 0, "", false});
  }
  std::vector<RemoteFile> out;
  for (const RemoteFile& f : select_pull_files(names, selection))
    out.push_back(client.file_metadata(info.commit, f.path));
  return out;
}

// Downloads the files (several at once) and links each into the snapshot. Fills the counters.
void fetch_all(const std::vector<RemoteFile>& files, const HubTarget& target, const RepoCache& repo,
               const std::string& commit, int jobs, PullProgress& progress, PullResult& result) {
  std::vector<const RemoteFile*> order;
  for (const RemoteFile& f : files) order.push_back(&f);
  // Largest first: the long transfers start at once and the small ones fill the gaps.
  std::stable_sort(order.begin(), order.end(),
                   [](const RemoteFile* a, const RemoteFile* b) { return a->size > b->size; });
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::exception_ptr first_error;
  auto fail_all = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (!first_error) first_error = std::current_exception();
    stop = true;
  };
  auto worker = [&] {
    std::unique_ptr<HttpClient> http;
    try {
      http = std::make_unique<HttpClient>();
    } catch (...) {
      fail_all();
      return;
    }
    for (;;) {
      const size_t i = next++;
      if (i >= order.size() || stop) return;
      const RemoteFile& f = *order[i];
      try {
        std::error_code ec;
        const bool present = fs::exists(repo.blob_path(f.etag), ec);
        DownloadEvents events;
        events.bytes = [&](int64_t on_disk, uint64_t network) {
          if (stop) throw Cancelled{};
          progress.bytes(on_disk, network);
        };
        events.note = [&](const std::string& line) { progress.note(line); };
        const uint64_t got =
            download_blob(*http, target, resolve_url(target, commit, f.path), f, repo, events);
        repo.link_snapshot_file(commit, f.path, f.etag);
        std::lock_guard<std::mutex> lock(mu);
        result.network_bytes += got;
        if (!present) {
          ++result.n_fetched;
          progress.file_done(f.path, f.size);
        }
      } catch (const Cancelled&) {
        return;
      } catch (...) {
        fail_all();
        return;
      }
    }
  };
  const size_t n_threads =
      std::min<size_t>(size_t(std::max(jobs, 1)), std::max<size_t>(order.size(), 1));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

PullResult from_cache(const fs::path& cache, const RepoRef& ref) {
  PullResult r;
  r.snapshot = resolve_cached_snapshot(cache, ref);
  r.commit = r.snapshot.filename().string();
  r.from_cache_only = true;
  for (const CachedRepo& repo : list_cached_repos(cache))
    for (const CachedRevision& rev : repo.revisions)
      if (repo.repo_id == ref.repo_id && rev.commit == r.commit) {
        r.n_files = rev.n_files;
        r.total_bytes = rev.size_bytes;
      }
  return r;
}

}  // namespace

PullResult hub_pull(const PullOptions& o) {
  const fs::path cache = hub_cache_dir();
  if (hub_offline()) {
    try {
      return from_cache(cache, o.ref);
    } catch (const Error& e) {
      fail("HF_HUB_OFFLINE is set, so nothing is downloaded: {}", e.what());
    }
  }
  PullProgress* progress_ptr = nullptr;
  auto note = [&](const std::string& line) {
    if (progress_ptr)
      progress_ptr->note(line);
    else
      std::fprintf(stderr, "pull: %s\n", line.c_str());
  };
  const HubTarget target{hub_endpoint(), hub_token(), o.ref.repo_id, o.ref.revision};
  HubClient client(target, note);
  RepoInfo info;
  try {
    info = client.repo_info();
  } catch (const HubUnreachable& e) {
    // As huggingface_hub does: without the network, a revision already cached still serves.
    try {
      PullResult r = from_cache(cache, o.ref);
      note(fmt::format("{}; using the cached snapshot", e.what()));
      return r;
    } catch (const Error&) {
      throw e;
    }
  }
  const RepoCache repo(cache, o.ref.repo_id);
  std::vector<RemoteFile> files = list_selected_files(client, info, o.selection);

  const bool has_weights = std::any_of(files.begin(), files.end(), [](const RemoteFile& f) {
    return ends_with(f.path, ".safetensors");
  });
  if (!has_weights && o.selection.include.empty()) {
    std::string listing;
    for (const std::string& p : info.files) listing += (listing.empty() ? "" : ", ") + p;
    if (listing.size() > 400) listing = listing.substr(0, 400) + "...";
    fail(
        "{} at {} has no .safetensors weights in its top folder (files: {}): hearth loads "
        "safetensors checkpoints; look for a safetensors version, or pass --include to fetch "
        "files anyway",
        o.ref.repo_id, o.ref.revision, listing.empty() ? "none" : listing);
  }

  // A gated repo lists its files to anyone, but downloads need a token of an account that
  // accepted its terms: say so before the first download fails.
  const bool any_missing = std::any_of(files.begin(), files.end(), [&](const RemoteFile& f) {
    std::error_code ec;
    return !fs::exists(repo.blob_path(f.etag), ec);
  });
  if (any_missing && !info.gated.empty() && target.token.empty())
    fail(
        "{} is a gated model: accept its terms at {}/{} and set HF_TOKEN to an access token of "
        "that account (or write it to {})",
        o.ref.repo_id, target.endpoint, o.ref.repo_id, (hf_home_dir() / "token").string());
  // The index first: it says which shards are the checkpoint (others, such as
  // consolidated.safetensors, are the same weights in another layout).
  auto index = std::find_if(files.begin(), files.end(),
                            [](const RemoteFile& f) { return f.path == kIndexName; });
  if (index != files.end()) {
    const RemoteFile index_file = *index;
    HttpClient http;
    download_blob(http, target, client.resolve_url(info.commit, index_file.path), index_file, repo,
                  {nullptr, note});
    const auto shards = index_shard_names(read_file(repo.blob_path(index_file.etag)),
                                          o.ref.repo_id + ":" + std::string(kIndexName));
    for (const std::string& shard : shards)
      if (std::none_of(files.begin(), files.end(),
                       [&](const RemoteFile& f) { return f.path == shard; }))
        fail("{}: {} names the shard '{}', which the repo does not have{}", o.ref.repo_id,
             kIndexName, shard, o.selection.exclude.empty() ? "" : " (or --exclude left out)");
    files = drop_unindexed_weights(files, shards, o.selection.include);
  }

  PullResult result;
  result.commit = info.commit;
  result.snapshot = repo.snapshot_dir(info.commit);
  result.n_files = files.size();
  uint64_t to_fetch = 0, fetch_files = 0, partial = 0;
  for (const RemoteFile& f : files) {
    result.total_bytes += f.size;
    std::error_code ec;
    if (!fs::exists(repo.blob_path(f.etag), ec)) {
      to_fetch += f.size;
      ++fetch_files;
      partial += std::min(f.size, file_size_or_zero(repo.incomplete_path(f.etag)));
    }
  }
  if (const auto free = free_bytes(repo.dir()); free && to_fetch - partial > *free)
    fail("not enough disk space for {}: it needs {} more in {}, {} is free", o.ref.text(),
         format_bytes(to_fetch - partial), cache.string(), format_bytes(*free));

  PullProgress progress(to_fetch, fetch_files, o.progress_bar);
  progress_ptr = &progress;
  try {
    fetch_all(files, target, repo, info.commit, o.jobs, progress, result);
  } catch (...) {
    progress.finish();
    throw;
  }
  progress.finish();
  if (o.ref.revision != info.commit) repo.write_ref(o.ref.revision, info.commit);
  return result;
}

}  // namespace hearth::hub

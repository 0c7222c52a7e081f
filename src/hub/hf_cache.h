// The Hugging Face cache on disk, shared with transformers, huggingface_hub, vLLM and mlx-lm:
//   $HF_HUB_CACHE/models--{org}--{name}/blobs/{etag}             file contents
//                                      /blobs/{etag}.incomplete  a partial download
//                                      /refs/{revision}          the commit a revision named
//                                      /snapshots/{commit}/{path} -> ../../blobs/{etag}
// and its lock files in $HF_HUB_CACHE/.locks/models--{org}--{name}/{etag}.lock. Everything here
// works offline: naming repos, resolving `org/name[:revision]` to a snapshot directory, listing
// and removing cached models. Paths that come from a remote listing are checked before use, so a
// hostile listing cannot write outside the repo folder.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::hub {

// "org/name" with an optional ":revision" (branch, tag or commit; default "main").
struct RepoRef {
  std::string repo_id;
  std::string revision = "main";
  bool revision_given = false;  // the text named a revision
  std::string text() const { return revision_given ? repo_id + ":" + revision : repo_id; }
};

// nullopt when `text` is not of the shape org/name[:revision] with the Hub's allowed characters.
std::optional<RepoRef> parse_repo_ref(std::string_view text);
// As parse_repo_ref, but throws hearth::Error saying what is wrong with `text`.
RepoRef parse_repo_ref_or_fail(std::string_view text);
// 40 lowercase hex digits: a git commit id (a revision that needs no ref).
bool is_commit_hash(std::string_view text);
// A repo-relative file path safe to join under a folder: relative, no "." or ".." or empty parts.
bool is_safe_repo_path(std::string_view path);

// Where the cache is: HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
std::filesystem::path hub_cache_dir();
// HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::filesystem::path hf_home_dir();
// HF_ENDPOINT without a trailing slash, else https://huggingface.co.
std::string hub_endpoint();
// HF_TOKEN, else the first line of the file HF_TOKEN_PATH or $HF_HOME/token; "" when none.
std::string hub_token();
// HF_HUB_OFFLINE set to 1/true/yes/on.
bool hub_offline();

// "models--org--name" for "org/name"; the inverse gives nullopt for other folder names.
std::string repo_folder_name(const std::string& repo_id);
std::optional<std::string> repo_id_from_folder_name(const std::string& folder);
// "org/name" when `dir` is .../models--org--name/snapshots/{commit} (what a server calls the
// model loaded from there); nullopt otherwise.
std::optional<std::string> repo_id_for_snapshot_dir(const std::filesystem::path& dir);

// One repo's folder in the cache. Nothing is created until a write.
class RepoCache {
 public:
  RepoCache(std::filesystem::path cache_dir, std::string repo_id);

  const std::string& repo_id() const { return repo_id_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path blob_path(const std::string& etag) const;
  std::filesystem::path incomplete_path(const std::string& etag) const;
  std::filesystem::path lock_path(const std::string& etag) const;
  std::filesystem::path snapshot_dir(const std::string& commit) const;

  // The commit refs/{revision} names; nullopt when there is no such ref (or it is malformed).
  std::optional<std::string> read_ref(const std::string& revision) const;
  // Writes refs/{revision} atomically (a temporary file renamed over it).
  void write_ref(const std::string& revision, const std::string& commit) const;
  // The commit `revision` stands for offline: a ref's commit, a commit with a snapshot, or a
  // unique prefix (7+ digits) of one. nullopt when nothing cached matches.
  std::optional<std::string> resolve_commit(const std::string& revision) const;
  // Makes snapshots/{commit}/{path} a relative link to blobs/{etag}, replacing what was there.
  void link_snapshot_file(const std::string& commit, const std::string& path,
                          const std::string& etag) const;

 private:
  std::filesystem::path cache_dir_;
  std::string repo_id_;
  std::filesystem::path dir_;
};

// The snapshot directory `ref` resolves to in the cache, offline. Throws hearth::Error saying
// what is cached and suggesting `hearth pull` when it is not there.
std::filesystem::path resolve_cached_snapshot(const std::filesystem::path& cache_dir,
                                              const RepoRef& ref);

struct CachedRevision {
  std::string commit;
  std::vector<std::string> refs;  // revisions naming this commit (may be empty)
  std::filesystem::path dir;      // the snapshot directory
  uint64_t size_bytes = 0;        // the blobs its files link to, each counted once
  size_t n_files = 0;
  size_t n_broken = 0;  // files whose link leads nowhere (an interrupted or damaged pull)
};

struct CachedRepo {
  std::string repo_id;
  std::filesystem::path dir;
  uint64_t size_on_disk = 0;      // blobs (shared between revisions once) and partial downloads
  uint64_t incomplete_bytes = 0;  // partial downloads (blobs/*.incomplete)
  std::vector<CachedRevision> revisions;  // sorted by commit
};

// Every models--* folder of the cache, sorted by repo id. A folder that cannot be read is
// listed with what could be read.
std::vector<CachedRepo> list_cached_repos(const std::filesystem::path& cache_dir);

struct RemoveResult {
  std::vector<std::string> commits_removed;
  size_t blobs_removed = 0;
  uint64_t bytes_freed = 0;
  bool repo_removed = false;  // the whole models--* folder (and its locks) went
};

// Without a revision: removes the repo's folder and locks. With one: its snapshot, the refs that
// named it, and the blobs no remaining snapshot links to (the folder too when nothing is left).
// Throws hearth::Error when the repo or revision is not cached.
RemoveResult remove_cached(const std::filesystem::path& cache_dir, const RepoRef& ref);

// "1.50 GB", "512 B": sizes as the CLI prints them (powers of 1000).
std::string format_bytes(uint64_t bytes);

}  // namespace hearth::hub

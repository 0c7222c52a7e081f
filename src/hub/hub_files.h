// What the Hub's API answers, parsed and checked (repo info, tree pages, Link headers), and
// which of a repo's files `hearth pull` fetches. No network here: the client (src/hub/net/)
// feeds these the bodies and headers it received, so every rule is testable offline.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::hub {

// A file of a repo at one commit. `etag` names its blob in the cache: the sha256 of an LFS file,
// the git blob sha1 of any other (both as the Hub reports them, lowercase hex).
struct RemoteFile {
  std::string path;
  uint64_t size = 0;
  std::string etag;
  bool lfs = false;  // etag is a sha256 of the contents; else a git blob sha1
};

struct RepoInfo {
  std::string commit;              // the revision's commit id (40 hex digits)
  std::vector<std::string> files;  // every file path of the repo at that commit
  std::string gated;               // "", "auto" or "manual" (needs a token of an accepted account)
};

// GET /api/models/{repo}/revision/{rev}. Throws hearth::Error naming `source` when the JSON is
// malformed or lacks a commit id.
RepoInfo parse_repo_info(std::string_view body, const std::string& source);
// One page of GET /api/models/{repo}/tree/{rev}?recursive=true: its files (folders skipped).
// Entries with unsafe paths or malformed sizes/hashes are errors naming `source`.
std::vector<RemoteFile> parse_tree_page(std::string_view body, const std::string& source);
// The rel="next" URL of a Link header (RFC 8288), resolved against nothing (the Hub sends
// absolute URLs); nullopt when there is none.
std::optional<std::string> parse_link_next(std::string_view link_header);
// An ETag header as a blob name: without W/ and quotes, lowercased.
std::string normalize_etag(std::string_view etag);
// A blob name safe as a file name in blobs/: 1-128 of [0-9a-z_-] (what the Hub's hashes are).
bool is_safe_etag(std::string_view etag);

// fnmatch-style glob (*, ?, [...]) where '*' also crosses '/' (as huggingface_hub's
// allow_patterns do).
bool glob_match(const std::string& pattern, const std::string& path);

struct FileSelection {
  std::vector<std::string> include;  // globs added to the default set (even subfolders)
  std::vector<std::string> exclude;  // globs removed from it (applied last)
};

// The files a checkpoint needs, in the repo's top folder: config and generation config,
// safetensors weights and their index, tokenizer files, chat templates, README and LICENSE.
// Weight duplicates in other formats (.bin, .pth, .gguf, .onnx, .h5, .msgpack, ...) and
// subfolders (onnx/, original/, ...) are left out.
bool is_default_pull_file(const std::string& path);
// The default set, plus `include`, minus `exclude`, in the listing's order.
std::vector<RemoteFile> select_pull_files(const std::vector<RemoteFile>& files,
                                          const FileSelection& selection);
// The shard file names model.safetensors.index.json's weight_map names. Throws hearth::Error
// naming `source` when the index is malformed.
std::vector<std::string> index_shard_names(std::string_view index_json, const std::string& source);
// Drops *.safetensors files of the top folder that the index does not name (consolidated.* and
// other duplicates), unless an `include` glob matches them.
std::vector<RemoteFile> drop_unindexed_weights(const std::vector<RemoteFile>& files,
                                               const std::vector<std::string>& shards,
                                               const std::vector<std::string>& include);

// "a%2Fb" for "a/b": a revision as one URL path segment. Paths keep their '/'.
std::string url_escape(std::string_view text, bool keep_slash);

}  // namespace hearth::hub

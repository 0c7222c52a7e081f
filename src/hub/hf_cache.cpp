#include "hub/hf_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"

namespace fs = std::filesystem;

namespace hearth::hub {

namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One part of a repo id, as the Hub allows it: 1-96 of [A-Za-z0-9_.-], starting and ending with a
// letter, digit or underscore.
bool is_repo_name_part(std::string_view s) {
  if (s.empty() || s.size() > 96) return false;
  for (char c : s)
    if (!is_word_char(c) && c != '-' && c != '.') return false;
  return is_word_char(s.front()) && is_word_char(s.back());
}

bool is_revision_text(std::string_view s) {
  if (s.empty() || s.size() > 255 || s.front() == '/' || s.back() == '/') return false;
  if (s.find("..") != std::string_view::npos || s.find("//") != std::string_view::npos)
    return false;
  for (char c : s)
    if (!is_word_char(c) && c != '-' && c != '.' && c != '/' && c != '+') return false;
  return true;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

// The file's size when `p` leads (through links) to a regular file.
std::optional<uint64_t> regular_file_size(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  const auto size = fs::file_size(p, ec);
  if (ec) return std::nullopt;
  return uint64_t(size);
}

// Every file or link under `dir` (recursively, links not followed), as paths relative to it.
std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code tec;
    const auto status = it->symlink_status(tec);
    if (!tec && !fs::is_directory(status)) out.push_back(it->path().lexically_relative(dir));
  }
  return out;
}

// The blob a snapshot entry links to: its target's file name when the target lies in blobs/.
std::optional<std::string> linked_blob(const fs::path& entry) {
  std::error_code ec;
  if (!fs::is_symlink(entry, ec)) return std::nullopt;
  const fs::path target = fs::read_symlink(entry, ec);
  if (ec) return std::nullopt;
  const fs::path parent = target.parent_path().filename();
  if (parent != "blobs") return std::nullopt;
  return target.filename().string();
}

// The refs under refs/ (nested for names such as "refs/pr/1") mapped to their commits.
std::map<std::string, std::string> read_all_refs(const RepoCache& repo) {
  std::map<std::string, std::string> refs;
  for (const fs::path& rel : files_under(repo.dir() / "refs")) {
    const std::string name = rel.generic_string();
    if (auto commit = repo.read_ref(name)) refs[name] = *commit;
  }
  return refs;
}

std::vector<std::string> snapshot_commits(const RepoCache& repo) {
  std::vector<std::string> commits;
  std::error_code ec;
  for (fs::directory_iterator it(repo.dir() / "snapshots", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory(ec)) commits.push_back(it->path().filename().string());
  std::sort(commits.begin(), commits.end());
  return commits;
}

}  // namespace

std::optional<RepoRef> parse_repo_ref(std::string_view text) {
  RepoRef ref;
  const size_t colon = text.find(':');
  std::string_view id = text.substr(0, colon);
  if (colon != std::string_view::npos) {
    ref.revision = std::string(text.substr(colon + 1));
    ref.revision_given = true;
    if (!is_revision_text(ref.revision)) return std::nullopt;
  }
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos || id.find('/', slash + 1) != std::string_view::npos)
    return std::nullopt;
  const std::string_view org = id.substr(0, slash), name = id.substr(slash + 1);
  if (!is_repo_name_part(org) || !is_repo_name_part(name)) return std::nullopt;
  // The Hub forbids "--" and ".." in ids; "--" would also make the cache folder name ambiguous.
  if (id.find("--") != std::string_view::npos || id.find("..") != std::string_view::npos)
    return std::nullopt;
  ref.repo_id = std::string(id);
  return ref;
}

RepoRef parse_repo_ref_or_fail(std::string_view text) {
  if (auto ref = parse_repo_ref(text)) return *ref;
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos && !is_revision_text(text.substr(colon + 1)))
    fail(
        "'{}': the revision after ':' must be a branch, tag or commit ([A-Za-z0-9._/+-], no "
        "'..')",
        text);
  fail(
      "'{}' is not a Hugging Face model id: expected ORG/NAME or ORG/NAME:REVISION (letters, "
      "digits, '_', '-', '.'; no '--' or '..')",
      text);
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  if (path.find('\0') != std::string_view::npos || path.find('\\') != std::string_view::npos)
    return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

fs::path hf_home_dir() {
  if (const char* v = env("HF_HOME")) return v;
  if (const char* v = env("XDG_CACHE_HOME")) return fs::path(v) / "huggingface";
  if (const char* v = env("HOME")) return fs::path(v) / ".cache" / "huggingface";
  return fs::path(".cache") / "huggingface";
}

fs::path hub_cache_dir() {
  if (const char* v = env("HF_HUB_CACHE")) return v;
  return hf_home_dir() / "hub";
}

std::string hub_endpoint() {
  std::string e = env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hub_token() {
  if (const char* v = env("HF_TOKEN")) return trim(v);
  const fs::path file =
      env("HF_TOKEN_PATH") ? fs::path(env("HF_TOKEN_PATH")) : hf_home_dir() / "token";
  std::ifstream in(file);
  std::string line;
  if (in && std::getline(in, line)) return trim(line);
  return "";
}

bool hub_offline() {
  const char* v = env("HF_HUB_OFFLINE");
  if (!v) return false;
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string name = "models--";
  for (char c : repo_id) {
    if (c == '/')
      name += "--";
    else
      name += c;
  }
  return name;
}

std::optional<std::string> repo_id_from_folder_name(const std::string& folder) {
  const std::string prefix = "models--";
  if (folder.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = folder.substr(prefix.size());
  const size_t sep = rest.find("--");
  if (sep == std::string::npos) return std::nullopt;
  const std::string id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
  if (!parse_repo_ref(id)) return std::nullopt;
  return id;
}

std::optional<std::string> repo_id_for_snapshot_dir(const fs::path& dir) {
  fs::path p = dir.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing slash
  if (!is_commit_hash(p.filename().string())) return std::nullopt;
  if (p.parent_path().filename() != "snapshots") return std::nullopt;
  return repo_id_from_folder_name(p.parent_path().parent_path().filename().string());
}

RepoCache::RepoCache(fs::path cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)),
      repo_id_(std::move(repo_id)),
      dir_(cache_dir_ / repo_folder_name(repo_id_)) {}

fs::path RepoCache::blob_path(const std::string& etag) const { return dir_ / "blobs" / etag; }

fs::path RepoCache::incomplete_path(const std::string& etag) const {
  return dir_ / "blobs" / (etag + ".incomplete");
}

fs::path RepoCache::lock_path(const std::string& etag) const {
  return cache_dir_ / ".locks" / repo_folder_name(repo_id_) / (etag + ".lock");
}

fs::path RepoCache::snapshot_dir(const std::string& commit) const {
  return dir_ / "snapshots" / commit;
}

std::optional<std::string> RepoCache::read_ref(const std::string& revision) const {
  if (!is_revision_text(revision)) return std::nullopt;
  std::ifstream in(dir_ / "refs" / revision);
  std::string commit;
  if (!in || !std::getline(in, commit)) return std::nullopt;
  commit = trim(commit);
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (!is_revision_text(revision)) fail("cannot record revision '{}': not a valid name", revision);
  const fs::path path = dir_ / "refs" / revision;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) fail("cannot create {}: {}", path.parent_path().string(), ec.message());
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out.flush()) fail("cannot write {}", tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) fail("cannot write {}: {}", path.string(), ec.message());
}

std::optional<std::string> RepoCache::resolve_commit(const std::string& revision) const {
  if (auto commit = read_ref(revision)) return commit;
  std::error_code ec;
  if (is_commit_hash(revision) && fs::is_directory(snapshot_dir(revision), ec)) return revision;
  // A commit prefix, as git accepts one: at least 7 hex digits, matching one snapshot only.
  if (revision.size() >= 7 && revision.size() < 40 &&
      std::all_of(revision.begin(), revision.end(),
                  [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    std::optional<std::string> found;
    for (const std::string& commit : snapshot_commits(*this)) {
      if (commit.rfind(revision, 0) != 0) continue;
      if (found) return std::nullopt;  // ambiguous
      found = commit;
    }
    return found;
  }
  return std::nullopt;
}

void RepoCache::link_snapshot_file(const std::string& commit, const std::string& path,
                                   const std::string& etag) const {
  if (!is_commit_hash(commit)) fail("'{}' is not a commit id", commit);
  if (!is_safe_repo_path(path)) fail("refusing the file path '{}' (not a relative path)", path);
  const fs::path link = snapshot_dir(commit) / path;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) fail("cannot create {}: {}", link.parent_path().string(), ec.message());
  // From snapshots/{commit}/{path}: one "../" per directory below the repo folder.
  fs::path target;
  for (size_t depth = 2 + size_t(std::count(path.begin(), path.end(), '/')); depth > 0; --depth)
    target /= "..";
  target = target / "blobs" / etag;
  // Built beside it and renamed over it, so a reader never sees the link missing.
  const fs::path tmp = link.string() + fmt::format(".tmp{}", ::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) fail("cannot create the link {}: {}", tmp.string(), ec.message());
  fs::rename(tmp, link, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail("cannot create the link {}: {}", link.string(), ec.message());
  }
}

fs::path resolve_cached_snapshot(const fs::path& cache_dir, const RepoRef& ref) {
  RepoCache repo(cache_dir, ref.repo_id);
  std::error_code ec;
  if (!fs::is_directory(repo.dir(), ec))
    fail("{} is not in the Hugging Face cache ({}): run `hearth pull {}` to download it",
         ref.repo_id, cache_dir.string(), ref.text());
  const auto commit = repo.resolve_commit(ref.revision);
  if (!commit) {
    std::string known;
    for (const auto& [name, c] : read_all_refs(repo)) known += (known.empty() ? "" : ", ") + name;
    for (const std::string& c : snapshot_commits(repo))
      known += (known.empty() ? "" : ", ") + c.substr(0, 8);
    fail("revision '{}' of {} is not in the cache (cached: {}): run `hearth pull {}`", ref.revision,
         ref.repo_id, known.empty() ? "nothing" : known, ref.text());
  }
  const fs::path dir = repo.snapshot_dir(*commit);
  if (!fs::is_directory(dir, ec))
    fail("{}: refs/{} names commit {} but its snapshot is missing: run `hearth pull {}`",
         repo.dir().string(), ref.revision, *commit, ref.text());
  return dir;
}

std::vector<CachedRepo> list_cached_repos(const fs::path& cache_dir) {
  std::vector<CachedRepo> repos;
  std::error_code ec;
  for (fs::directory_iterator it(cache_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code dec;
    if (!it->is_directory(dec)) continue;
    const auto id = repo_id_from_folder_name(it->path().filename().string());
    if (!id) continue;
    RepoCache cache(cache_dir, *id);
    CachedRepo repo{*id, it->path(), 0, 0, {}};
    std::map<std::string, uint64_t> blob_sizes;
    std::error_code bec;
    for (fs::directory_iterator b(it->path() / "blobs", bec); !bec && b != fs::directory_iterator();
         b.increment(bec)) {
      std::error_code sec;
      if (!b->is_regular_file(sec)) continue;
      const uint64_t size = b->file_size(sec);
      if (sec) continue;
      repo.size_on_disk += size;
      const std::string name = b->path().filename().string();
      if (b->path().extension() == ".incomplete")
        repo.incomplete_bytes += size;
      else
        blob_sizes[name] = size;
    }
    const auto refs = read_all_refs(cache);
    for (const std::string& commit : snapshot_commits(cache)) {
      CachedRevision rev;
      rev.commit = commit;
      rev.dir = cache.snapshot_dir(commit);
      for (const auto& [name, c] : refs)
        if (c == commit) rev.refs.push_back(name);
      std::set<std::string> counted;
      for (const fs::path& rel : files_under(rev.dir)) {
        ++rev.n_files;
        const fs::path entry = rev.dir / rel;
        const auto size = regular_file_size(entry);
        if (!size) {
          ++rev.n_broken;
          continue;
        }
        // A link into blobs/ counts that blob once; a plain file (copied in) counts itself.
        const auto blob = linked_blob(entry);
        if (!blob || counted.insert(*blob).second) rev.size_bytes += *size;
      }
      repo.revisions.push_back(std::move(rev));
    }
    repos.push_back(std::move(repo));
  }
  std::sort(repos.begin(), repos.end(),
            [](const CachedRepo& a, const CachedRepo& b) { return a.repo_id < b.repo_id; });
  return repos;
}

RemoveResult remove_cached(const fs::path& cache_dir, const RepoRef& ref) {
  RepoCache repo(cache_dir, ref.repo_id);
  std::error_code ec;
  if (!fs::is_directory(repo.dir(), ec))
    fail("{} is not in the Hugging Face cache ({})", ref.repo_id, cache_dir.string());
  RemoveResult result;
  // Size of what goes: the regular files under a folder (links themselves count nothing).
  auto bytes_under = [](const fs::path& dir) {
    uint64_t total = 0;
    for (const fs::path& rel : files_under(dir)) {
      std::error_code sec;
      const fs::path p = dir / rel;
      if (fs::is_symlink(p, sec)) continue;
      const auto size = fs::file_size(p, sec);
      if (!sec) total += size;
    }
    return total;
  };

  if (!ref.revision_given) {
    result.commits_removed = snapshot_commits(repo);
    result.bytes_freed = bytes_under(repo.dir() / "blobs");
    result.blobs_removed = files_under(repo.dir() / "blobs").size();
    // remove_all never follows links, so nothing outside the folder is touched.
    fs::remove_all(repo.dir(), ec);
    if (ec) fail("cannot remove {}: {}", repo.dir().string(), ec.message());
    fs::remove_all(cache_dir / ".locks" / repo_folder_name(ref.repo_id), ec);
    result.repo_removed = true;
    return result;
  }

  const auto commit = repo.resolve_commit(ref.revision);
  if (!commit) {
    resolve_cached_snapshot(cache_dir, ref);  // throws, listing what is cached
    fail("revision '{}' of {} is not in the cache", ref.revision, ref.repo_id);
  }
  fs::remove_all(repo.snapshot_dir(*commit), ec);
  if (ec) fail("cannot remove {}: {}", repo.snapshot_dir(*commit).string(), ec.message());
  result.commits_removed.push_back(*commit);
  for (const auto& [name, c] : read_all_refs(repo))
    if (c == *commit) fs::remove(repo.dir() / "refs" / name, ec);

  // Blobs still linked from some snapshot stay; partial downloads stay for a later resume.
  std::set<std::string> linked;
  for (const std::string& other : snapshot_commits(repo))
    for (const fs::path& rel : files_under(repo.snapshot_dir(other)))
      if (auto blob = linked_blob(repo.snapshot_dir(other) / rel)) linked.insert(*blob);
  std::vector<fs::path> unlinked;  // collected first: no removal while the folder is read
  for (fs::directory_iterator b(repo.dir() / "blobs", ec); !ec && b != fs::directory_iterator();
       b.increment(ec)) {
    const std::string name = b->path().filename().string();
    if (b->path().extension() != ".incomplete" && !linked.count(name))
      unlinked.push_back(b->path());
  }
  for (const fs::path& blob : unlinked) {
    std::error_code sec;
    const auto size =
        fs::is_regular_file(fs::symlink_status(blob, sec)) ? fs::file_size(blob, sec) : 0;
    if (fs::remove(blob, sec)) {
      ++result.blobs_removed;
      result.bytes_freed += size;
    }
  }
  if (snapshot_commits(repo).empty()) {
    result.bytes_freed += bytes_under(repo.dir() / "blobs");
    fs::remove_all(repo.dir(), ec);
    fs::remove_all(cache_dir / ".locks" / repo_folder_name(ref.repo_id), ec);
    result.repo_removed = true;
  }
  return result;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double b = double(bytes);
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace hearth::hub

// The Hugging Face cache layout (src/hub/hf_cache.h): model ids, folder names, refs, snapshot
// links, offline resolution, listing and removal, built by hand in a temp dir the way
// huggingface_hub lays it out.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "hub/hf_cache.h"
#include "unit/loader_test_util.h"

namespace hearth::hub {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;
using test::write_bytes;

const std::string kCommitA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kCommitB = "abcdef0123456789abcdef0123456789abcdef01";

// Sets an environment variable for one scope and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A blob and a snapshot file linking to it, as a pull leaves them.
void add_file(const RepoCache& repo, const std::string& commit, const std::string& path,
              const std::string& etag, const std::string& contents) {
  fs::create_directories(repo.blob_path(etag).parent_path());
  write_bytes(repo.blob_path(etag), contents);
  repo.link_snapshot_file(commit, path, etag);
}

TEST(HubRepoRef, ParsesIdAndRevision) {
  auto r = parse_repo_ref("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(r->revision, "main");
  EXPECT_FALSE(r->revision_given);
  EXPECT_EQ(r->text(), "Qwen/Qwen3-0.6B");

  r = parse_repo_ref("meta-llama/Llama-3.2-1B_x.y:v1.0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->revision, "v1.0");
  EXPECT_TRUE(r->revision_given);
  EXPECT_EQ(r->text(), "meta-llama/Llama-3.2-1B_x.y:v1.0");
  r = parse_repo_ref("org/name:refs/pr/1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->revision, "refs/pr/1");
}

TEST(HubRepoRef, RejectsWhatIsNotAModelId) {
  for (const char* bad : {"", "name", "a/b/c", "/name", "org/", "org/na--me", "org/..x", "-org/x",
                          "org/x-", "org/name:", "org/name:../x", "org/name:a b", "org/name:/x",
                          "./models", "../a/b", "org/na me", "models/default/"})
    EXPECT_FALSE(parse_repo_ref(bad)) << bad;
  EXPECT_NE(error_of([] { parse_repo_ref_or_fail("org/name:a b"); }).find("revision"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref_or_fail("a/b/c"); }).find("ORG/NAME"), std::string::npos);
}

TEST(HubRepoRef, SafePathsAndCommits) {
  for (const char* ok : {"config.json", "onnx/model.onnx", "a/b/c.txt", ".gitattributes"})
    EXPECT_TRUE(is_safe_repo_path(ok)) << ok;
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/", "a\\b"})
    EXPECT_FALSE(is_safe_repo_path(bad)) << bad;
  EXPECT_TRUE(is_commit_hash(kCommitB));
  EXPECT_FALSE(is_commit_hash(kCommitB.substr(1)));
  EXPECT_FALSE(is_commit_hash("ABCDEF0123456789ABCDEF0123456789ABCDEF01"));
}

TEST(HubCacheLayout, FolderNamesRoundTrip) {
  EXPECT_EQ(repo_folder_name("Qwen/Qwen3-0.6B"), "models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(repo_id_from_folder_name("models--Qwen--Qwen3-0.6B"), "Qwen/Qwen3-0.6B");
  EXPECT_FALSE(repo_id_from_folder_name("datasets--org--name"));
  EXPECT_FALSE(repo_id_from_folder_name("models--noorg"));
  EXPECT_FALSE(repo_id_from_folder_name(".locks"));

  EXPECT_EQ(repo_id_for_snapshot_dir("/c/hub/models--org--name/snapshots/" + kCommitB), "org/name");
  EXPECT_EQ(repo_id_for_snapshot_dir("/c/hub/models--org--name/snapshots/" + kCommitB + "/"),
            "org/name");
  EXPECT_FALSE(repo_id_for_snapshot_dir("/c/hub/models--org--name/snapshots/main"));
  EXPECT_FALSE(repo_id_for_snapshot_dir("/c/hub/org/snapshots/" + kCommitB));
  EXPECT_FALSE(repo_id_for_snapshot_dir("models/default"));
}

TEST(HubCacheLayout, EnvironmentChoosesTheCacheAndToken) {
  TempDir dir;
  ScopedEnv cache("HF_HUB_CACHE", nullptr), home("HF_HOME", dir.path().c_str()),
      token("HF_TOKEN", nullptr), token_path("HF_TOKEN_PATH", nullptr),
      endpoint("HF_ENDPOINT", "http://mirror.example/"), offline("HF_HUB_OFFLINE", "1");
  EXPECT_EQ(hub_cache_dir(), dir.path() / "hub");
  EXPECT_EQ(hub_endpoint(), "http://mirror.example");
  EXPECT_TRUE(hub_offline());
  EXPECT_EQ(hub_token(), "");
  write_bytes(dir / "token", "hf_from_file\n");
  EXPECT_EQ(hub_token(), "hf_from_file");
  {
    ScopedEnv t("HF_TOKEN", " hf_from_env ");
    EXPECT_EQ(hub_token(), "hf_from_env");
  }
  ScopedEnv explicit_cache("HF_HUB_CACHE", "/elsewhere/hub"), not_offline("HF_HUB_OFFLINE", "0");
  EXPECT_EQ(hub_cache_dir(), fs::path("/elsewhere/hub"));
  EXPECT_FALSE(hub_offline());
}

TEST(HubCacheLayout, SnapshotLinksAreRelativeAndRefsResolve) {
  TempDir dir;
  RepoCache repo(dir.path(), "org/name");
  add_file(repo, kCommitB, "config.json", "e1", "{}");
  add_file(repo, kCommitB, "sub/dir/tokenizer.json", "e2", "tok");
  EXPECT_EQ(fs::read_symlink(repo.snapshot_dir(kCommitB) / "config.json"),
            fs::path("../../blobs/e1"));
  EXPECT_EQ(fs::read_symlink(repo.snapshot_dir(kCommitB) / "sub/dir/tokenizer.json"),
            fs::path("../../../../blobs/e2"));
  EXPECT_EQ(test::read_bytes(repo.snapshot_dir(kCommitB) / "sub/dir/tokenizer.json"), "tok");
  // Relinking replaces the link.
  add_file(repo, kCommitB, "config.json", "e3", "{\"a\":1}");
  EXPECT_EQ(test::read_bytes(repo.snapshot_dir(kCommitB) / "config.json"), "{\"a\":1}");
  EXPECT_NE(error_of([&] { repo.link_snapshot_file(kCommitB, "../evil", "e1"); }).find("../evil"),
            std::string::npos);

  repo.write_ref("main", kCommitB);
  repo.write_ref("refs/pr/1", kCommitB);
  EXPECT_EQ(repo.read_ref("main"), kCommitB);
  EXPECT_EQ(repo.read_ref("refs/pr/1"), kCommitB);
  EXPECT_EQ(repo.resolve_commit("main"), kCommitB);
  EXPECT_EQ(repo.resolve_commit(kCommitB), kCommitB);
  EXPECT_EQ(repo.resolve_commit("abcdef0"), kCommitB);  // a unique prefix
  EXPECT_FALSE(repo.resolve_commit("abcdef"));          // too short to be a prefix
  EXPECT_FALSE(repo.resolve_commit("v2"));
  EXPECT_EQ(resolve_cached_snapshot(dir.path(), *parse_repo_ref("org/name")),
            repo.snapshot_dir(kCommitB));
  EXPECT_EQ(repo.lock_path("e1"), dir.path() / ".locks" / "models--org--name" / "e1.lock");

  // A malformed ref is no ref.
  write_bytes(repo.dir() / "refs" / "broken", "not a commit");
  EXPECT_FALSE(repo.read_ref("broken"));
}

TEST(HubCacheLayout, UncachedModelsSayHowToPullThem) {
  TempDir dir;
  std::string e = error_of([&] { resolve_cached_snapshot(dir.path(), *parse_repo_ref("org/x")); });
  EXPECT_NE(e.find("hearth pull org/x"), std::string::npos) << e;
  RepoCache repo(dir.path(), "org/x");
  add_file(repo, kCommitA, "config.json", "e1", "{}");
  repo.write_ref("main", kCommitA);
  e = error_of([&] { resolve_cached_snapshot(dir.path(), *parse_repo_ref("org/x:v2")); });
  EXPECT_NE(e.find("revision 'v2'"), std::string::npos) << e;
  EXPECT_NE(e.find("main"), std::string::npos) << e;  // what is cached
  EXPECT_NE(e.find("hearth pull org/x:v2"), std::string::npos) << e;
}

TEST(HubCacheLayout, ListsRevisionsWithSharedBlobsCountedOnce) {
  TempDir dir;
  RepoCache repo(dir.path(), "org/name");
  add_file(repo, kCommitA, "model.safetensors", "w", std::string(1000, 'w'));
  add_file(repo, kCommitA, "config.json", "c1", "{}");
  repo.link_snapshot_file(kCommitB, "model.safetensors", "w");  // shared with A
  add_file(repo, kCommitB, "config.json", "c2", "{\"x\":1}");
  repo.link_snapshot_file(kCommitB, "tokenizer.json", "gone");  // its blob is missing
  write_bytes(repo.incomplete_path("partial"), std::string(10, 'p'));
  repo.write_ref("main", kCommitB);
  repo.write_ref("v1", kCommitA);
  fs::create_directories(dir / "datasets--org--data");  // not a model: not listed

  const auto repos = list_cached_repos(dir.path());
  ASSERT_EQ(repos.size(), 1u);
  const CachedRepo& r = repos[0];
  EXPECT_EQ(r.repo_id, "org/name");
  EXPECT_EQ(r.size_on_disk, 1000u + 2 + 7 + 10);
  EXPECT_EQ(r.incomplete_bytes, 10u);
  ASSERT_EQ(r.revisions.size(), 2u);
  EXPECT_EQ(r.revisions[0].commit, kCommitA);
  EXPECT_EQ(r.revisions[0].refs, std::vector<std::string>{"v1"});
  EXPECT_EQ(r.revisions[0].size_bytes, 1002u);
  EXPECT_EQ(r.revisions[0].n_broken, 0u);
  EXPECT_EQ(r.revisions[1].refs, std::vector<std::string>{"main"});
  EXPECT_EQ(r.revisions[1].size_bytes, 1007u);
  EXPECT_EQ(r.revisions[1].n_files, 3u);
  EXPECT_EQ(r.revisions[1].n_broken, 1u);
  EXPECT_TRUE(list_cached_repos(dir / "absent").empty());
}

TEST(HubCacheLayout, RemovingARevisionKeepsWhatOthersUse) {
  TempDir dir;
  RepoCache repo(dir.path(), "org/name");
  add_file(repo, kCommitA, "model.safetensors", "w", std::string(1000, 'w'));
  add_file(repo, kCommitA, "config.json", "c1", "{}");
  repo.link_snapshot_file(kCommitB, "model.safetensors", "w");
  add_file(repo, kCommitB, "config.json", "c2", "{\"x\":1}");
  write_bytes(repo.incomplete_path("partial"), "pp");
  repo.write_ref("main", kCommitB);
  repo.write_ref("v1", kCommitA);

  RemoveResult r = remove_cached(dir.path(), *parse_repo_ref("org/name:v1"));
  EXPECT_EQ(r.commits_removed, std::vector<std::string>{kCommitA});
  EXPECT_EQ(r.blobs_removed, 1u);  // c1; w is still main's
  EXPECT_EQ(r.bytes_freed, 2u);
  EXPECT_FALSE(r.repo_removed);
  EXPECT_FALSE(fs::exists(repo.snapshot_dir(kCommitA)));
  EXPECT_FALSE(fs::exists(repo.dir() / "refs" / "v1"));
  EXPECT_FALSE(fs::exists(repo.blob_path("c1")));
  EXPECT_TRUE(fs::exists(repo.blob_path("w")));
  EXPECT_TRUE(fs::exists(repo.incomplete_path("partial")));  // kept for a resume
  EXPECT_EQ(resolve_cached_snapshot(dir.path(), *parse_repo_ref("org/name")),
            repo.snapshot_dir(kCommitB));
  EXPECT_NE(error_of([&] {
              remove_cached(dir.path(), *parse_repo_ref("org/name:v1"));
            }).find("revision 'v1'"),
            std::string::npos);

  // The last revision takes the folder with it (by commit prefix here).
  r = remove_cached(dir.path(), *parse_repo_ref("org/name:abcdef01"));
  EXPECT_TRUE(r.repo_removed);
  EXPECT_FALSE(fs::exists(repo.dir()));
}

TEST(HubCacheLayout, RemovingARepoTakesItsFolderAndLocksOnly) {
  TempDir dir;
  RepoCache repo(dir.path(), "org/name");
  add_file(repo, kCommitA, "config.json", "c1", "{}");
  // A snapshot entry linking outside the cache: removal deletes the link, not its target.
  write_bytes(dir / "outside.txt", "keep me");
  fs::create_symlink(dir / "outside.txt", repo.snapshot_dir(kCommitA) / "extra.txt");
  fs::create_directories(repo.lock_path("c1").parent_path());
  write_bytes(repo.lock_path("c1"), "");
  RepoCache other(dir.path(), "org/other");
  add_file(other, kCommitA, "config.json", "c1", "{}");

  const RemoveResult r = remove_cached(dir.path(), *parse_repo_ref("org/name"));
  EXPECT_TRUE(r.repo_removed);
  EXPECT_EQ(r.bytes_freed, 2u);
  EXPECT_FALSE(fs::exists(repo.dir()));
  EXPECT_FALSE(fs::exists(repo.lock_path("c1").parent_path()));
  EXPECT_EQ(test::read_bytes(dir / "outside.txt"), "keep me");
  EXPECT_TRUE(fs::exists(other.blob_path("c1")));
  EXPECT_NE(error_of([&] {
              remove_cached(dir.path(), *parse_repo_ref("org/name"));
            }).find("not in the Hugging Face cache"),
            std::string::npos);
}

TEST(HubCacheLayout, FormatsBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1500), "1.50 KB");
  EXPECT_EQ(format_bytes(26285600), "26.29 MB");
  EXPECT_EQ(format_bytes(uint64_t(1.5e9)), "1.50 GB");
}

}  // namespace
}  // namespace hearth::hub

// `hearth pull ORG/NAME[:REVISION]`, `hearth ls`, `hearth rm ORG/NAME[:REVISION]`: models from
// the Hugging Face Hub (or a mirror, HF_ENDPOINT) in the standard Hugging Face cache, so that
// `-m ORG/NAME` loads them and other tools share them. ls and rm work offline and in a build
// without libcurl; pull then says it cannot download.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "hub/hf_cache.h"
#include "loader/config.h"
#include "models/model.h"
#ifdef HEARTH_HAVE_CURL
#include "hub/net/pull.h"
#endif

namespace hearth::cli {

namespace {

struct PullCliOptions {
  std::string model;
  std::vector<std::string> include, exclude;
  int jobs = 4;
};

int run_pull(const PullCliOptions& o) {
  const hub::RepoRef ref = hub::parse_repo_ref_or_fail(o.model);
  if (o.jobs < 1 || o.jobs > 32) fail("--jobs must be in [1, 32], got {}", o.jobs);
#ifdef HEARTH_HAVE_CURL
  hub::PullOptions options;
  options.ref = ref;
  options.selection = {o.include, o.exclude};
  options.jobs = o.jobs;
  options.progress_bar = ::isatty(STDERR_FILENO) != 0;
  const hub::PullResult r = hub::hub_pull(options);
  std::printf("%s %s -> %s: %zu files, %s (%zu fetched, %s downloaded)%s\n", ref.repo_id.c_str(),
              ref.revision.c_str(), r.commit.substr(0, 12).c_str(), r.n_files,
              hub::format_bytes(r.total_bytes).c_str(), r.n_fetched,
              hub::format_bytes(r.network_bytes).c_str(),
              r.from_cache_only ? " [from the cache, offline]" : "");
  std::printf("snapshot: %s\n", r.snapshot.string().c_str());
  std::printf("use it:   hearth serve -m %s\n", ref.text().c_str());
  return 0;
#else
  fail(
      "this hearth was built without download support (libcurl or OpenSSL was not found at "
      "build time, or -DHEARTH_DOWNLOAD=OFF: install libcurl4-openssl-dev and libssl-dev, then "
      "reconfigure and rebuild); models already in the Hugging Face cache ({}) still load with "
      "-m {}",
      hub::hub_cache_dir().string(), ref.repo_id);
#endif
}

// What hearth can tell of a snapshot without loading weights: its model_type is supported and
// its weights are there.
std::string loadable_verdict(const hub::CachedRevision& rev) {
  if (rev.n_broken > 0) return "incomplete";
  std::error_code ec;
  if (!std::filesystem::exists(rev.dir / "config.json", ec)) return "no config.json";
  std::string model_type;
  try {
    model_type = ModelConfig::load(rev.dir).model_type();
  } catch (const std::exception&) {
    return "bad config.json";
  }
  const auto types = supported_model_types();
  if (std::find(types.begin(), types.end(), model_type) == types.end())
    return "no (" + model_type + ")";
  bool weights = false;
  for (const auto& e : std::filesystem::directory_iterator(rev.dir, ec))
    weights = weights || e.path().extension() == ".safetensors";
  return weights ? "yes" : "no weights";
}

int run_ls(bool as_json) {
  const auto cache = hub::hub_cache_dir();
  const auto repos = hub::list_cached_repos(cache);
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& repo : repos)
      for (const auto& rev : repo.revisions)
        out.push_back({{"model", repo.repo_id},
                       {"refs", rev.refs},
                       {"commit", rev.commit},
                       {"path", rev.dir.string()},
                       {"size", rev.size_bytes},
                       {"files", rev.n_files},
                       {"loadable", loadable_verdict(rev)}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (repos.empty()) {
    std::printf("no models in the Hugging Face cache (%s): `hearth pull ORG/NAME` fetches one\n",
                cache.string().c_str());
    return 0;
  }
  std::printf("%-44s %-12s %-10s %10s  %s\n", "MODEL", "REVISION", "COMMIT", "SIZE", "LOADABLE");
  uint64_t total = 0;
  for (const auto& repo : repos) {
    total += repo.size_on_disk;
    for (const auto& rev : repo.revisions) {
      std::string refs;
      for (const auto& r : rev.refs) refs += (refs.empty() ? "" : ",") + r;
      std::printf("%-44s %-12s %-10s %10s  %s\n", repo.repo_id.c_str(),
                  refs.empty() ? "-" : refs.c_str(), rev.commit.substr(0, 10).c_str(),
                  hub::format_bytes(rev.size_bytes).c_str(), loadable_verdict(rev).c_str());
    }
    if (repo.revisions.empty())
      std::printf("%-44s %-12s %-10s %10s  %s\n", repo.repo_id.c_str(), "-", "-",
                  hub::format_bytes(repo.size_on_disk).c_str(), "incomplete (no snapshot)");
    if (repo.incomplete_bytes > 0)
      std::printf("%-44s (%s of partial downloads: `hearth pull` resumes them)\n", "",
                  hub::format_bytes(repo.incomplete_bytes).c_str());
  }
  std::printf("%zu model%s, %s on disk in %s\n", repos.size(), repos.size() == 1 ? "" : "s",
              hub::format_bytes(total).c_str(), cache.string().c_str());
  return 0;
}

int run_rm(const std::string& model) {
  const hub::RepoRef ref = hub::parse_repo_ref_or_fail(model);
  const hub::RemoveResult r = hub::remove_cached(hub::hub_cache_dir(), ref);
  std::string commits;
  for (const auto& c : r.commits_removed)
    commits += (commits.empty() ? "" : ", ") + c.substr(0, 10);
  std::printf(
      "removed %s (%s; %zu blob%s, %s freed)%s\n", ref.text().c_str(),
      commits.empty() ? "no snapshot" : commits.c_str(), r.blobs_removed,
      r.blobs_removed == 1 ? "" : "s", hub::format_bytes(r.bytes_freed).c_str(),
      ref.revision_given && r.repo_removed ? "; no revision left, the repo folder went" : "");
  return 0;
}

CommandRegistration pull_command(
    "pull", "download a model from the Hugging Face Hub into the Hugging Face cache",
    [](CLI::App& sub) {
      auto o = std::make_shared<PullCliOptions>();
      sub.add_option("model", o->model, "ORG/NAME or ORG/NAME:REVISION (branch, tag or commit)")
          ->required();
      sub.add_option("--include", o->include,
                     "also fetch files matching this glob (repeatable; e.g. 'original/*')");
      sub.add_option("--exclude", o->exclude, "skip files matching this glob (repeatable)");
      sub.add_option("-j,--jobs", o->jobs, "files downloaded at once")->capture_default_str();
      sub.footer(
          "Environment: HF_ENDPOINT (a mirror), HF_TOKEN or $HF_HOME/token (gated and private "
          "models), HF_HOME / HF_HUB_CACHE (the cache), HF_HUB_OFFLINE=1 (no network).");
      return [o] { return run_pull(*o); };
    });

CommandRegistration ls_command("ls", "list the models in the Hugging Face cache",
                               [](CLI::App& sub) {
                                 auto as_json = std::make_shared<bool>(false);
                                 sub.add_flag("--json", *as_json, "one JSON array of revisions");
                                 return [as_json] { return run_ls(*as_json); };
                               });

CommandRegistration rm_command(
    "rm", "remove a model (or one revision of it) from the Hugging Face cache", [](CLI::App& sub) {
      auto model = std::make_shared<std::string>();
      sub.add_option("model", *model,
                     "ORG/NAME (every revision) or ORG/NAME:REVISION (a branch, tag or commit; "
                     "blobs other revisions use stay)")
          ->required();
      return [model] { return run_rm(*model); };
    });

}  // namespace
}  // namespace hearth::cli

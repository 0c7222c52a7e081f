// The Hub's HTTP API as `hearth pull` uses it: repo info at a revision, the file tree with sizes
// and hashes (paginated), a file's metadata from a HEAD of its resolve URL (for mirrors without
// the tree API), and the retry policy and error messages every request shares. Errors name the
// repo, revision or file and say what to do (set HF_TOKEN, check the name).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "hub/hub_files.h"
#include "hub/net/http_client.h"

namespace hearth::hub {

// The endpoint gave no HTTP answer at all (offline, DNS, refused) after the retries.
class HubUnreachable : public Error {
 public:
  using Error::Error;
};

struct HubTarget {
  std::string endpoint;  // https://huggingface.co or a mirror (HF_ENDPOINT)
  std::string token;     // "" when none
  std::string repo_id;
  std::string revision;
};

// Runs `attempt` up to `max_attempts` times, waiting 0.5 s, 1 s, 2 s, ... (at most 8 s; a 429's
// Retry-After up to 30 s) between tries while it fails transiently: a TransportError marked
// transient (twice at most when no connection could be made), or an answer of 429 or 5xx
// (returned by `attempt`). `on_retry` hears why.
HttpResponse with_retries(const std::function<HttpResponse()>& attempt, int max_attempts,
                          const std::function<void(const std::string&)>& on_retry);

// Throws hearth::Error for an answer that is not a success, worded from its status and
// X-Error-Code: gated or private repos (set HF_TOKEN), a repo, revision or file not found.
// `file` is "" for repo-level requests.
[[noreturn]] void fail_hub_answer(const HubTarget& target, const HttpResponse& r,
                                  const std::string& file);

// {endpoint}/{repo}/resolve/{commit}/{path}: where a file's contents are fetched.
std::string resolve_url(const HubTarget& target, const std::string& commit,
                        const std::string& path);

class HubClient {
 public:
  explicit HubClient(HubTarget target, std::function<void(const std::string&)> on_retry = {});

  const HubTarget& target() const { return target_; }
  // GET {endpoint}/api/models/{repo}/revision/{revision}; HubUnreachable without an answer.
  RepoInfo repo_info();
  // Every file at `commit`, following the tree's Link pages. Returns false (and nothing) when
  // the endpoint has no tree API (a 404 without an X-Error-Code, as some mirrors answer).
  bool list_files(const std::string& commit, std::vector<RemoteFile>& files);
  // A file's size and blob name from a HEAD of its resolve URL (redirects to the CDN are not
  // followed: the Hub's own answer carries X-Linked-Etag and X-Linked-Size).
  RemoteFile file_metadata(const std::string& commit, const std::string& path);
  std::string resolve_url(const std::string& commit, const std::string& path) const {
    return hub::resolve_url(target_, commit, path);
  }

 private:
  HttpResponse get(const std::string& url, const std::string& method, bool follow);

  HubTarget target_;
  std::function<void(const std::string&)> on_retry_;
  HttpClient http_;
};

}  // namespace hearth::hub

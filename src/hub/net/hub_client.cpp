#include "hub/net/hub_client.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "hub/hf_cache.h"

namespace hearth::hub {

namespace {

bool is_retryable_status(long status) { return status == 429 || (status >= 500 && status < 600); }

// The Hub's own words for an error: X-Error-Message, else a JSON body's "error".
std::string hub_message(const HttpResponse& r) {
  std::string m = r.header("x-error-message");
  if (m.empty()) {
    try {
      const auto j = nlohmann::json::parse(r.body);
      if (j.is_object() && j.contains("error") && j["error"].is_string())
        m = j["error"].get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (m.size() > 300) m = m.substr(0, 300) + "...";
  return m;
}

double retry_after_seconds(const HttpResponse& r) {
  try {
    return std::clamp(std::stod(r.header("retry-after")), 0.0, 30.0);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

HttpResponse with_retries(const std::function<HttpResponse()>& attempt, int max_attempts,
                          const std::function<void(const std::string&)>& on_retry) {
  double wait_s = 0.5;
  for (int i = 1;; ++i) {
    std::string why;
    double this_wait = wait_s;
    try {
      HttpResponse r = attempt();
      if (!is_retryable_status(r.status) || i >= max_attempts) return r;
      why = fmt::format("HTTP {} from {}", r.status, r.url);
      if (double ra = retry_after_seconds(r); ra >= 0) this_wait = std::max(this_wait, ra);
    } catch (const TransportError& e) {
      // Refused or unresolvable: a machine offline stays so; two quick tries tell it.
      const int limit = e.no_connection ? std::min(max_attempts, 2) : max_attempts;
      if (!e.transient || i >= limit) throw;
      why = e.what();
    }
    if (on_retry)
      on_retry(
          fmt::format("{}; retrying in {:.1f} s ({}/{})", why, this_wait, i, max_attempts - 1));
    std::this_thread::sleep_for(std::chrono::duration<double>(this_wait));
    wait_s = std::min(wait_s * 2, 8.0);
  }
}

void fail_hub_answer(const HubTarget& t, const HttpResponse& r, const std::string& file) {
  const std::string code = r.header("x-error-code");
  const std::string msg = hub_message(r);
  const std::string said = msg.empty() ? "" : ": " + msg;
  const bool has_token = !t.token.empty();
  if (code == "GatedRepo")
    fail("{} is a gated model (HTTP {}{}): accept its terms at {}/{} and {}", t.repo_id, r.status,
         said, t.endpoint, t.repo_id,
         has_token ? "check that the token in HF_TOKEN (or $HF_HOME/token) belongs to that account"
                   : "set HF_TOKEN to an access token of that account");
  if (r.status == 401) {
    if (has_token)
      fail(
          "{}: not found, or the token in HF_TOKEN (or $HF_HOME/token) is invalid or has no "
          "access to it (HTTP 401{})",
          t.repo_id, said);
    fail(
        "{}: not found at {}, or it is private or gated (HTTP 401{}): check the name, or set "
        "HF_TOKEN to an access token that can read it",
        t.repo_id, t.endpoint, said);
  }
  if (r.status == 403)
    fail("{}: access denied (HTTP 403{}){}", t.repo_id, said,
         has_token ? ": the token may lack read access to this repo" : ": set HF_TOKEN");
  if (r.status == 404) {
    if (code == "RevisionNotFound")
      fail("{}: revision '{}' not found (no such branch, tag or commit)", t.repo_id, t.revision);
    if (code == "EntryNotFound" || (!file.empty() && code != "RepoNotFound"))
      fail("{}: file '{}' not found at revision {}", t.repo_id, file, t.revision);
    fail("{}: repository not found at {}{}", t.repo_id, t.endpoint,
         has_token ? "" : " (if it is private, set HF_TOKEN)");
  }
  const std::string what = file.empty() ? t.repo_id : t.repo_id + ": " + file;
  fail("{}: HTTP {} from {}{}", what, r.status, r.url, said);
}

HubClient::HubClient(HubTarget target, std::function<void(const std::string&)> on_retry)
    : target_(std::move(target)), on_retry_(std::move(on_retry)) {}

HttpResponse HubClient::get(const std::string& url, const std::string& method, bool follow) {
  return with_retries(
      [&] {
        HttpRequest req;
        req.method = method;
        req.url = url;
        req.bearer_token = target_.token;
        req.follow_redirects = follow;
        return http_.perform(req);
      },
      5, on_retry_);
}

RepoInfo HubClient::repo_info() {
  const std::string url = fmt::format("{}/api/models/{}/revision/{}", target_.endpoint,
                                      target_.repo_id, url_escape(target_.revision, false));
  HttpResponse r;
  try {
    r = get(url, "GET", true);
  } catch (const TransportError& e) {
    throw HubUnreachable(fmt::format("cannot reach {}: {}", target_.endpoint, e.what()));
  }
  if (r.status != 200) fail_hub_answer(target_, r, "");
  return parse_repo_info(r.body, url);
}

bool HubClient::list_files(const std::string& commit, std::vector<RemoteFile>& files) {
  files.clear();
  std::string url = fmt::format("{}/api/models/{}/tree/{}?recursive=true", target_.endpoint,
                                target_.repo_id, commit);
  for (int page = 0; page < 100000; ++page) {
    HttpResponse r;
    try {
      r = get(url, "GET", true);
    } catch (const TransportError& e) {
      fail("cannot list the files of {}: {}", target_.repo_id, e.what());
    }
    if (r.status == 404 && r.header("x-error-code").empty() && page == 0) return false;
    if (r.status != 200) fail_hub_answer(target_, r, "");
    for (RemoteFile& f : parse_tree_page(r.body, url)) files.push_back(std::move(f));
    const auto next = parse_link_next(r.header("link"));
    if (!next) return true;
    url = *next;
  }
  fail("{}: the file listing does not end (over 100000 pages)", target_.repo_id);
}

RemoteFile HubClient::file_metadata(const std::string& commit, const std::string& path) {
  std::string url = resolve_url(commit, path);
  const std::string origin = url_origin(target_.endpoint);
  for (int hop = 0; hop < 10; ++hop) {
    HttpResponse r;
    try {
      r = get(url, "HEAD", false);
    } catch (const TransportError& e) {
      fail("{}: cannot read the metadata of '{}': {}", target_.repo_id, path, e.what());
    }
    const std::string linked = r.header("x-linked-etag");
    // A redirect within the Hub (a renamed repo) is followed; one to the CDN carries the answer.
    if (r.status >= 300 && r.status < 400 && linked.empty() && !r.redirect_url.empty() &&
        url_origin(r.redirect_url) == origin) {
      url = r.redirect_url;
      continue;
    }
    if (r.status >= 400 || r.status < 200) fail_hub_answer(target_, r, path);
    RemoteFile f;
    f.path = path;
    f.etag = normalize_etag(linked.empty() ? r.header("etag") : linked);
    const std::string size =
        r.header("x-linked-size").empty() ? r.header("content-length") : r.header("x-linked-size");
    try {
      size_t used = 0;
      f.size = std::stoull(size, &used);
      if (used != size.size()) throw std::invalid_argument("size");
    } catch (const std::exception&) {
      fail("{}: '{}' has no size in its metadata (HEAD {})", target_.repo_id, path, url);
    }
    f.lfs = f.etag.size() == 64;
    if (!is_safe_etag(f.etag))
      fail("{}: '{}' has no usable ETag in its metadata (HEAD {})", target_.repo_id, path, url);
    return f;
  }
  fail("{}: too many redirects reading the metadata of '{}'", target_.repo_id, path);
}

std::string resolve_url(const HubTarget& target, const std::string& commit,
                        const std::string& path) {
  return fmt::format("{}/{}/resolve/{}/{}", target.endpoint, target.repo_id, commit,
                     url_escape(path, true));
}

}  // namespace hearth::hub

#include "hub/hub_files.h"

#include <fnmatch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "hub/hf_cache.h"

namespace hearth::hub {

namespace {

using nlohmann::json;

json parse_json(std::string_view body, const std::string& source) {
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::exception&) {
    fail("{}: the answer is not valid JSON ({} bytes)", source, body.size());
  }
}

bool is_hex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

namespace {

RepoInfo parse_repo_info_unchecked(std::string_view body, const std::string& source) {
  const json j = parse_json(body, source);
  if (!j.is_object()) fail("{}: expected a JSON object", source);
  RepoInfo info;
  const auto sha = j.find("sha");
  if (sha == j.end() || !sha->is_string() || !is_commit_hash(sha->get<std::string>()))
    fail("{}: no commit id (\"sha\") in the answer", source);
  info.commit = sha->get<std::string>();
  if (auto g = j.find("gated"); g != j.end() && g->is_string()) info.gated = g->get<std::string>();
  if (auto s = j.find("siblings"); s != j.end() && s->is_array())
    for (const json& f : *s)
      if (f.is_object() && f.contains("rfilename") && f["rfilename"].is_string())
        info.files.push_back(f["rfilename"].get<std::string>());
  return info;
}

std::vector<RemoteFile> parse_tree_page_unchecked(std::string_view body,
                                                  const std::string& source) {
  const json j = parse_json(body, source);
  if (!j.is_array()) fail("{}: expected a JSON array of entries", source);
  std::vector<RemoteFile> files;
  for (const json& e : j) {
    if (!e.is_object() || !e.contains("path") || !e["path"].is_string())
      fail("{}: an entry without a path", source);
    const std::string path = e["path"].get<std::string>();
    if (e.value("type", "") != "file") continue;  // "directory"
    if (!is_safe_repo_path(path)) fail("{}: refusing the file path '{}'", source, path);
    RemoteFile f;
    f.path = path;
    const json* size = e.contains("size") ? &e["size"] : nullptr;
    if (e.contains("lfs") && e["lfs"].is_object()) {
      const json& lfs = e["lfs"];
      f.lfs = true;
      f.etag = lfs.value("oid", "");
      if (lfs.contains("size")) size = &lfs["size"];
      if (!is_hex(f.etag, 64)) fail("{}: '{}' has no valid sha256 (lfs.oid)", source, path);
    } else {
      f.etag = e.value("oid", "");
      if (!is_hex(f.etag, 40)) fail("{}: '{}' has no valid git object id (oid)", source, path);
    }
    if (!size || !size->is_number_unsigned()) fail("{}: '{}' has no valid size", source, path);
    f.size = size->get<uint64_t>();
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

std::optional<std::string> parse_link_next(std::string_view header) {
  // Entries: <url>; rel="next", <url>; rel="prev" — commas inside <...> belong to the URL.
  size_t pos = 0;
  while (pos < header.size()) {
    const size_t open = header.find('<', pos);
    if (open == std::string_view::npos) break;
    const size_t close = header.find('>', open);
    if (close == std::string_view::npos) break;
    const std::string_view url = header.substr(open + 1, close - open - 1);
    size_t end = header.find('<', close);
    if (end == std::string_view::npos) end = header.size();
    std::string params = lower(std::string(header.substr(close + 1, end - close - 1)));
    params.erase(std::remove_if(params.begin(), params.end(),
                                [](char c) { return c == ' ' || c == '"' || c == '\t'; }),
                 params.end());
    if (params.find(";rel=next") != std::string::npos) return std::string(url);
    pos = close + 1;
  }
  return std::nullopt;
}

std::string normalize_etag(std::string_view etag) {
  std::string e(etag);
  if (e.rfind("W/", 0) == 0) e.erase(0, 2);
  e.erase(std::remove(e.begin(), e.end(), '"'), e.end());
  return lower(e);
}

bool is_safe_etag(std::string_view etag) {
  return !etag.empty() && etag.size() <= 128 && std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '_' || c == '-';
  });
}

bool glob_match(const std::string& pattern, const std::string& path) {
  return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0;
}

bool is_default_pull_file(const std::string& path) {
  if (path.find('/') != std::string::npos) return false;
  const std::string name = lower(path);
  if (ends_with(name, ".safetensors") || ends_with(name, ".jinja") || ends_with(name, ".tiktoken"))
    return true;
  // Tokenizer vocabularies in the formats tokenizer.json replaces, kept for other tools.
  if (name == "tokenizer.model" || name == "merges.txt" || name == "vocab.txt") return true;
  if (name == "readme.md" || name.rfind("license", 0) == 0 || name == "notice") return true;
  // Configs, tokenizer files, chat_template.json, the safetensors index; not the indexes of
  // weight formats hearth does not read.
  if (ends_with(name, ".json"))
    return !ends_with(name, ".bin.index.json") && !ends_with(name, ".pt.index.json") &&
           !ends_with(name, ".pth.index.json");
  return false;
}

std::vector<RemoteFile> select_pull_files(const std::vector<RemoteFile>& files,
                                          const FileSelection& selection) {
  std::vector<RemoteFile> out;
  for (const RemoteFile& f : files) {
    bool take = is_default_pull_file(f.path);
    for (const auto& g : selection.include) take = take || glob_match(g, f.path);
    for (const auto& g : selection.exclude) take = take && !glob_match(g, f.path);
    if (take) out.push_back(f);
  }
  return out;
}

namespace {

std::vector<std::string> index_shard_names_unchecked(std::string_view index_json,
                                                     const std::string& source) {
  const json j = parse_json(index_json, source);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: no \"weight_map\" object", source);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map[\"{}\"] is not a file name", source, tensor);
    shards.insert(shard.get<std::string>());
  }
  return {shards.begin(), shards.end()};
}

}  // namespace

std::vector<RemoteFile> drop_unindexed_weights(const std::vector<RemoteFile>& files,
                                               const std::vector<std::string>& shards,
                                               const std::vector<std::string>& include) {
  const std::set<std::string> named(shards.begin(), shards.end());
  std::vector<RemoteFile> out;
  for (const RemoteFile& f : files) {
    const bool top_weight =
        f.path.find('/') == std::string::npos && ends_with(f.path, ".safetensors");
    bool keep = !top_weight || named.count(f.path);
    for (const auto& g : include) keep = keep || glob_match(g, f.path);  // asked for: kept
    if (keep) out.push_back(f);
  }
  return out;
}

std::string url_escape(std::string_view text, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (plain) {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

namespace {

// Runs `parse`, turning a JSON value of an unexpected type (a number where a string belongs)
// into an error naming `source`.
template <typename Fn>
auto checked(const std::string& source, Fn&& parse) {
  try {
    return parse();
  } catch (const json::exception& e) {
    fail("{}: unexpected JSON in the answer ({})", source, e.what());
  }
}

}  // namespace

RepoInfo parse_repo_info(std::string_view body, const std::string& source) {
  return checked(source, [&] { return parse_repo_info_unchecked(body, source); });
}

std::vector<RemoteFile> parse_tree_page(std::string_view body, const std::string& source) {
  return checked(source, [&] { return parse_tree_page_unchecked(body, source); });
}

std::vector<std::string> index_shard_names(std::string_view index_json, const std::string& source) {
  return checked(source, [&] { return index_shard_names_unchecked(index_json, source); });
}

}  // namespace hearth::hub

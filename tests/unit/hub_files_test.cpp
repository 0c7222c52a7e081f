// The Hub's answers as `hearth pull` reads them (src/hub/hub_files.h): repo info, tree pages
// (hostile entries refused), Link pagination, ETags, and which files a pull takes.
#include "hub/hub_files.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "unit/loader_test_util.h"

namespace hearth::hub {
namespace {

using test::error_of;

const std::string kSha256 = "e37bc1ef3a1412ee37ca691dc2ea209ff754ccb0f0c13bde891763ffc74ce995";
const std::string kSha1 = "9267781693f982009bbc52f6b38126e5121fcfb2";

std::vector<std::string> paths_of(const std::vector<RemoteFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path);
  return out;
}

std::vector<RemoteFile> listing(const std::vector<std::string>& paths) {
  std::vector<RemoteFile> out;
  for (const auto& p : paths) out.push_back({p, 1, kSha1, false});
  return out;
}

TEST(HubFiles, RepoInfo) {
  const RepoInfo info = parse_repo_info(
      R"({"id":"o/n","sha":")" + kSha1 +
          R"(","gated":"manual","siblings":[{"rfilename":"config.json"},{"rfilename":"a/b.txt"},{"x":1}]})",
      "info");
  EXPECT_EQ(info.commit, kSha1);
  EXPECT_EQ(info.gated, "manual");
  EXPECT_EQ(info.files, (std::vector<std::string>{"config.json", "a/b.txt"}));
  EXPECT_NE(error_of([] { parse_repo_info(R"({"sha":"main"})", "info"); }).find("commit id"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info("<html>", "the-url"); }).find("the-url"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info("[]", "info"); }).find("object"), std::string::npos);
}

TEST(HubFiles, TreePage) {
  const auto files = parse_tree_page(R"([
    {"type":"directory","oid":")" + kSha1 +
                                         R"(","size":0,"path":"onnx"},
    {"type":"file","oid":")" + kSha1 + R"(","size":1202,"path":"config.json"},
    {"type":"file","oid":")" + kSha1 + R"(","size":134,"path":"model.safetensors",
     "lfs":{"oid":")" + kSha256 + R"(","size":26285600,"pointerSize":134}}])",
                                     "tree");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, "config.json");
  EXPECT_EQ(files[0].size, 1202u);
  EXPECT_EQ(files[0].etag, kSha1);
  EXPECT_FALSE(files[0].lfs);
  EXPECT_EQ(files[1].size, 26285600u);  // the LFS size, not the pointer's
  EXPECT_EQ(files[1].etag, kSha256);
  EXPECT_TRUE(files[1].lfs);
}

TEST(HubFiles, TreePageRefusesHostileOrBrokenEntries) {
  auto entry = [](const std::string& path, const std::string& rest) {
    return R"([{"type":"file","path":")" + path + "\"," + rest + "}]";
  };
  const std::string good = R"("oid":")" + kSha1 + R"(","size":1)";
  EXPECT_NO_THROW(parse_tree_page(entry("ok.json", good), "tree"));
  EXPECT_NE(error_of([&] { parse_tree_page(entry("../../etc/x", good), "tree"); }).find("../../"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_tree_page(entry("/abs", good), "tree"); }).find("/abs"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_tree_page(entry("a.json", R"("oid":"../x","size":1)"), "t");
            }).find("object id"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_tree_page(entry("a.json", R"("oid":")" + kSha1 + R"(","size":-1)"), "t");
            }).find("size"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_tree_page(entry("a.json", good + R"(,"lfs":{"oid":"nothex","size":1})"), "t");
            }).find("sha256"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_tree_page(R"({"a":1})", "t"); }).find("array"), std::string::npos);
  EXPECT_NE(error_of([] { parse_tree_page(R"([{"type":"file"}])", "t"); }).find("path"),
            std::string::npos);
}

TEST(HubFiles, LinkHeaderNext) {
  EXPECT_EQ(parse_link_next(R"(<https://h/api/x?cursor=abc&a=1>; rel="next")"),
            "https://h/api/x?cursor=abc&a=1");
  EXPECT_EQ(parse_link_next(R"(<https://h/p1>; rel="prev", <https://h/p3>; rel="next")"),
            "https://h/p3");
  EXPECT_EQ(parse_link_next(R"(<https://h/a,b>; rel=next)"), "https://h/a,b");
  EXPECT_FALSE(parse_link_next(R"(<https://h/p1>; rel="prev")"));
  EXPECT_FALSE(parse_link_next(""));
  EXPECT_FALSE(parse_link_next("<unterminated"));
}

TEST(HubFiles, Etags) {
  EXPECT_EQ(normalize_etag("\"ABC123\""), "abc123");
  EXPECT_EQ(normalize_etag("W/\"" + kSha256 + "\""), kSha256);
  EXPECT_TRUE(is_safe_etag(kSha256));
  EXPECT_FALSE(is_safe_etag(""));
  EXPECT_FALSE(is_safe_etag("../x"));
  EXPECT_FALSE(is_safe_etag("a/b"));
  EXPECT_FALSE(is_safe_etag(std::string(200, 'a')));
}

TEST(HubFiles, DefaultSelectionIsTheCheckpoint) {
  const auto all = listing({"config.json",
                            "generation_config.json",
                            "model.safetensors",
                            "model.safetensors.index.json",
                            "tokenizer.json",
                            "tokenizer_config.json",
                            "special_tokens_map.json",
                            "chat_template.jinja",
                            "tokenizer.model",
                            "merges.txt",
                            "vocab.json",
                            "README.md",
                            "LICENSE",
                            ".gitattributes",
                            "pytorch_model.bin",
                            "pytorch_model.bin.index.json",
                            "model.gguf",
                            "model.onnx",
                            "tf_model.h5",
                            "flax_model.msgpack",
                            "original/consolidated.pth",
                            "onnx/model.onnx",
                            "onnx/config.json",
                            "notes.txt"});
  EXPECT_EQ(paths_of(select_pull_files(all, {})),
            (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                      "model.safetensors.index.json", "tokenizer.json",
                                      "tokenizer_config.json", "special_tokens_map.json",
                                      "chat_template.jinja", "tokenizer.model", "merges.txt",
                                      "vocab.json", "README.md", "LICENSE"}));
  FileSelection s;
  s.include = {"original/*"};
  s.exclude = {"README.md", "*.jinja"};
  const auto picked = paths_of(select_pull_files(all, s));
  EXPECT_NE(std::find(picked.begin(), picked.end(), "original/consolidated.pth"), picked.end());
  EXPECT_EQ(std::find(picked.begin(), picked.end(), "README.md"), picked.end());
  EXPECT_EQ(std::find(picked.begin(), picked.end(), "chat_template.jinja"), picked.end());
}

TEST(HubFiles, TheIndexChoosesTheShards) {
  const std::string index = R"({"metadata":{},"weight_map":{
      "a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors",
      "c":"model-00001-of-00002.safetensors"}})";
  const auto shards = index_shard_names(index, "idx");
  EXPECT_EQ(shards, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors"}));
  const auto files =
      listing({"config.json", "consolidated.safetensors", "model-00001-of-00002.safetensors",
               "model-00002-of-00002.safetensors", "model.safetensors.index.json",
               "sub/extra.safetensors"});
  EXPECT_EQ(paths_of(drop_unindexed_weights(files, shards, {})),
            (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json", "sub/extra.safetensors"}));
  EXPECT_EQ(drop_unindexed_weights(files, shards, {"consolidated.*"}).size(), files.size());
  EXPECT_NE(error_of([] { index_shard_names(R"({"weight_map":[]})", "idx"); }).find("weight_map"),
            std::string::npos);
  EXPECT_NE(error_of([] { index_shard_names(R"({"weight_map":{"a":1}})", "idx"); }).find("\"a\""),
            std::string::npos);
}

TEST(HubFiles, GlobsAndEscaping) {
  EXPECT_TRUE(glob_match("*.safetensors", "model.safetensors"));
  EXPECT_TRUE(glob_match("*.json", "onnx/config.json"));  // '*' crosses '/'
  EXPECT_TRUE(glob_match("model-0000?-of-*.safetensors", "model-00001-of-00002.safetensors"));
  EXPECT_FALSE(glob_match("*.bin", "model.safetensors"));
  EXPECT_EQ(url_escape("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_escape("sub dir/a+b.json", true), "sub%20dir/a%2Bb.json");
}

}  // namespace
}  // namespace hearth::hub

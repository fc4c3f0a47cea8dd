// Hub ids and the Hugging Face cache: a real cache layout (refs/, snapshots/ with links into
// blobs/) built in a temporary folder, read as huggingface_hub writes it.
#include "predict/hub_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

#include "common/temp_dir.h"
#include "predict/model_description.h"

namespace vramscope::predict {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMain = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kOld = "fedcba9876543210fedcba9876543210fedcba98";

constexpr const char* kConfig = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
  "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "tie_word_embeddings": true})";

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// models--org--name with refs/main -> kMain, both snapshots' config.json linking into blobs/ as
// huggingface_hub lays them out (relative links), and a tag v1 -> kOld.
fs::path MakeCache(const fs::path& root) {
  const fs::path repo = root / "models--org--name";
  Write(repo / "blobs/aaaa", kConfig);
  Write(repo / "blobs/bbbb", kConfig);
  Write(repo / "refs/main", std::string(kMain) + "\n");  // huggingface_hub writes no newline
  Write(repo / "refs/v1", kOld);
  fs::create_directories(repo / "snapshots" / kMain);
  fs::create_directories(repo / "snapshots" / kOld);
  fs::create_symlink("../../blobs/aaaa", repo / "snapshots" / kMain / "config.json");
  fs::create_symlink("../../blobs/bbbb", repo / "snapshots" / kOld / "config.json");
  return root;
}

TEST(HubIdTest, ParsesRepoAndRevision) {
  auto id = ParseHubId("meta-llama/Llama-3.2-3B");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->repo, "meta-llama/Llama-3.2-3B");
  EXPECT_EQ(id->revision, "main");
  EXPECT_EQ(id->Text(), "meta-llama/Llama-3.2-3B");
  id = ParseHubId("org/name@refs/pr/1");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->revision, "refs/pr/1");
  EXPECT_EQ(id->Text(), "org/name@refs/pr/1");
  for (const char* bad : {"gpt2", "a/b/c", "/abs", "org/", "org/..", "org/na me", "org/name@",
                          "org/name@../x", "-org/name", "org/name.", "hf:org/name"}) {
    EXPECT_FALSE(ParseHubId(bad)) << bad;
  }
}

TEST(HubIdTest, FilesStayFiles) {
  TempDir dir("hub-cache-test-");
  EXPECT_TRUE(IsHubModel("org/name"));
  EXPECT_FALSE(IsHubModel("org/config.json"));
  EXPECT_FALSE(IsHubModel("org/trace.jsonl"));
  EXPECT_FALSE(IsHubModel("org/model.py"));
  const fs::path here = fs::current_path();
  fs::current_path(dir.path());
  Write("org/name", kConfig);  // an existing file of that name is read as a file
  EXPECT_FALSE(IsHubModel("org/name"));
  EXPECT_TRUE(IsHubModel("org/other"));
  fs::current_path(here);
}

TEST(HubCacheTest, DirFollowsHuggingFaceHubsOrder) {
  setenv("HOME", "/home/u", 1);
  unsetenv("HF_HUB_CACHE");
  unsetenv("HF_HOME");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(HubCacheDir(), fs::path("/home/u/.cache/huggingface/hub"));
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(HubCacheDir(), fs::path("/xdg/huggingface/hub"));
  setenv("HF_HOME", "/hf", 1);
  EXPECT_EQ(HubCacheDir(), fs::path("/hf/hub"));
  setenv("HF_HUB_CACHE", "/cache", 1);
  EXPECT_EQ(HubCacheDir(), fs::path("/cache"));
  unsetenv("HF_HUB_CACHE");
  unsetenv("HF_HOME");
  unsetenv("XDG_CACHE_HOME");
}

TEST(HubCacheTest, OfflineAsHuggingFaceHubReadsIt) {
  for (const char* on : {"1", "ON", "yes", "True"}) {
    setenv("HF_HUB_OFFLINE", on, 1);
    EXPECT_TRUE(HubOffline()) << on;
  }
  for (const char* off : {"0", "", "no"}) {
    setenv("HF_HUB_OFFLINE", off, 1);
    EXPECT_FALSE(HubOffline()) << off;
  }
  unsetenv("HF_HUB_OFFLINE");
  EXPECT_FALSE(HubOffline());
}

TEST(HubCacheTest, FindsTheRefsSnapshotThroughItsLink) {
  TempDir dir("hub-cache-test-");
  const fs::path cache = MakeCache(dir.path());
  const fs::path snapshots = cache / "models--org--name/snapshots";

  auto found = FindCachedConfig(cache, *ParseHubId("org/name"));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->commit, kMain);
  EXPECT_EQ(found->config, snapshots / kMain / "config.json");

  found = FindCachedConfig(cache, *ParseHubId("org/name@v1"));  // a tag's ref
  ASSERT_TRUE(found);
  EXPECT_EQ(found->commit, kOld);

  found = FindCachedConfig(cache, *ParseHubId(std::string("org/name@") + kOld));  // a commit
  ASSERT_TRUE(found);
  EXPECT_EQ(found->config, snapshots / kOld / "config.json");
}

TEST(HubCacheTest, WhatIsNotThereIsNotCached) {
  TempDir dir("hub-cache-test-");
  const fs::path cache = MakeCache(dir.path());
  const fs::path repo = cache / "models--org--name";
  EXPECT_FALSE(FindCachedConfig(cache, *ParseHubId("org/other")));
  EXPECT_FALSE(FindCachedConfig(cache, *ParseHubId("org/name@dev")));  // no such ref
  EXPECT_FALSE(FindCachedConfig(                                       // a commit with no snapshot
      cache, *ParseHubId("org/name@1111111111111111111111111111111111111111")));
  Write(repo / "refs/junk", "not a commit");
  EXPECT_FALSE(FindCachedConfig(cache, *ParseHubId("org/name@junk")));
  fs::remove(repo / "blobs/aaaa");  // the link into blobs/ is broken
  EXPECT_FALSE(FindCachedConfig(cache, *ParseHubId("org/name")));
}

TEST(HubCacheTest, LoadModelSpecReadsTheCacheAndNamesTheCommit) {
  TempDir dir("hub-cache-test-");
  setenv("HF_HUB_CACHE", MakeCache(dir.path()).c_str(), 1);
  auto spec = LoadModelSpec("org/name");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->label, "org/name@0123456789ab (llama)");
  EXPECT_EQ(spec->layers, 2u);
  EXPECT_EQ(spec->kv_heads, 2u);

  auto missing = LoadModelSpec("org/other");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(missing.status().message().find("hf download org/other config.json"), std::string::npos)
      << missing.status().message();
  unsetenv("HF_HUB_CACHE");
}

TEST(HubCacheTest, DownloadCommandNamesTheRevision) {
  EXPECT_EQ(HubDownloadCommand(*ParseHubId("org/name")), "hf download org/name config.json");
  EXPECT_EQ(HubDownloadCommand(*ParseHubId("org/name@v1")),
            "hf download org/name config.json --revision v1");
}

}  // namespace
}  // namespace vramscope::predict

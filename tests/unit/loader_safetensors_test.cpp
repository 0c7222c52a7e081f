// Safetensors parsing and the WeightStore: round trips, every corrupt-header case, truncation and
// random corruption (must error, never crash), sharded checkpoints and the weight audit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "loader/safetensors.h"
#include "loader/weight_store.h"
#include "loader_test_util.h"

namespace hearth {
namespace {

using test::error_of;
using test::make_safetensors;
using test::raw;
using test::safetensors_bytes;
using test::StTensor;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

std::vector<StTensor> sample_tensors() {
  std::vector<uint16_t> bf16, f16;
  for (float v : {1.0f, -2.5f, 0.15625f, 3e4f, -1e-3f, 7.0f}) {
    bf16.push_back(f32_to_bf16(v));
    f16.push_back(f32_to_f16(v));
  }
  return {
      {"f32", "F32", {2, 3}, raw(std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f, -4.0f, 1e-7f})},
      {"bf16", "BF16", {3, 2}, raw(bf16)},
      {"f16", "F16", {6}, raw(f16)},
      {"i32", "I32", {1, 2, 2}, raw(std::vector<int32_t>{7, -8, 2147483647, -2147483647 - 1})},
      {"scalar", "F32", {}, raw(std::vector<float>{42.0f})},
      {"empty", "F32", {0, 4}, ""},
  };
}

TEST(Safetensors, RoundTripsDtypesAndData) {
  TempDir dir;
  auto path = dir / "model.safetensors";
  write_bytes(path, make_safetensors(sample_tensors(), {{"format", "pt"}}));
  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 6u);
  EXPECT_EQ(file.metadata().at("format"), "pt");

  const auto* f32 = file.find("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->dtype, DType::F32);
  EXPECT_EQ(f32->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f32->nbytes, 24u);
  const float* fp = static_cast<const float*>(f32->data);
  EXPECT_EQ(fp[0], 0.5f);
  EXPECT_EQ(fp[3], 3.25f);
  EXPECT_EQ(fp[5], 1e-7f);

  const auto* bf16 = file.find("bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->dtype, DType::BF16);
  const uint16_t* bp = static_cast<const uint16_t*>(bf16->data);
  EXPECT_EQ(bf16_to_f32(bp[1]), -2.5f);
  EXPECT_EQ(bf16_to_f32(bp[2]), 0.15625f);

  const auto* f16 = file.find("f16");
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->dtype, DType::F16);
  EXPECT_EQ(f16_to_f32(static_cast<const uint16_t*>(f16->data)[5]), 7.0f);

  const auto* i32 = file.find("i32");
  ASSERT_NE(i32, nullptr);
  EXPECT_EQ(i32->shape, (std::vector<int64_t>{1, 2, 2}));
  const int32_t* ip = static_cast<const int32_t*>(i32->data);
  EXPECT_EQ(ip[1], -8);
  EXPECT_EQ(ip[2], 2147483647);

  EXPECT_TRUE(file.find("scalar")->shape.empty());
  EXPECT_EQ(*static_cast<const float*>(file.find("scalar")->data), 42.0f);
  EXPECT_EQ(file.find("empty")->nbytes, 0u);
  EXPECT_EQ(file.find("missing"), nullptr);
  // Tensors come back in file order.
  EXPECT_EQ(file.tensors()[0].name, "f32");
  EXPECT_EQ(file.tensors()[1].name, "bf16");
}

TEST(Safetensors, HeaderOnlyFileMaps) {
  TempDir dir;
  auto path = dir / "empty.safetensors";
  write_bytes(path, safetensors_bytes("{}", ""));
  auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.tensors().empty());
  write_bytes(path, safetensors_bytes(R"({"__metadata__": {"a": "b"}})", ""));
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("a"), "b");
}

struct CorruptCase {
  const char* label;
  std::string bytes;
  std::vector<std::string> expected;  // substrings of the message (besides the file name)
};

std::vector<CorruptCase> corrupt_cases() {
  auto one = [](const std::string& entry, const std::string& data) {
    return safetensors_bytes(R"({"w.weight": )" + entry + "}", data);
  };
  const std::string d16(16, '\x01');
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes: absurd
  std::string past(8, '\0');
  past[0] = 100;  // 100-byte header in a 12-byte file
  past += "{}  ";
  return {
      {"tiny", "abc", {"too short"}},
      {"absurd", huge + "{}", {"absurd"}},
      {"past_eof", past, {"past the end"}},
      {"not_json", safetensors_bytes("{not json", ""), {"not valid JSON"}},
      {"not_object", safetensors_bytes("[1, 2]", ""), {"expected an object"}},
      {"entry_not_object", one("3", d16), {"w.weight", "expected an object"}},
      {"no_dtype", one(R"({"shape": [4], "data_offsets": [0, 16]})", d16), {"w.weight", "dtype"}},
      {"no_shape", one(R"({"dtype": "F32", "data_offsets": [0, 16]})", d16), {"w.weight", "shape"}},
      {"no_offsets", one(R"({"dtype": "F32", "shape": [4]})", d16), {"w.weight", "data_offsets"}},
      {"dtype_type",
       one(R"({"dtype": 4, "shape": [4], "data_offsets": [0, 16]})", d16),
       {"w.weight", "dtype"}},
      {"shape_type",
       one(R"({"dtype": "F32", "shape": "4", "data_offsets": [0, 16]})", d16),
       {"w.weight", "shape"}},
      {"shape_float",
       one(R"({"dtype": "F32", "shape": [4.5], "data_offsets": [0, 16]})", d16),
       {"w.weight", "non-integer"}},
      {"offsets_type",
       one(R"({"dtype": "F32", "shape": [4], "data_offsets": "0-16"})", d16),
       {"w.weight", "data_offsets"}},
      {"offsets_len",
       one(R"({"dtype": "F32", "shape": [4], "data_offsets": [16]})", d16),
       {"w.weight", "data_offsets"}},
      {"offsets_neg",
       one(R"({"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]})", d16),
       {"w.weight", "data_offsets"}},
      {"unknown_dtype",
       one(R"({"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]})", d16),
       {"w.weight", "unknown dtype 'Q7'"}},
      {"fp8",
       one(R"({"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]})", d16),
       {"w.weight", "unsupported dtype 'F8_E4M3'"}},
      {"neg_dim",
       one(R"({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]})", d16),
       {"w.weight", "negative"}},
      {"nine_dims",
       one(R"({"dtype": "U8", "shape": [1, 1, 1, 1, 2, 2, 2, 2, 1], "data_offsets": [0, 16]})",
           d16),
       {"w.weight", "9 dims"}},
      {"begin_gt_end",
       one(R"({"dtype": "F32", "shape": [0], "data_offsets": [16, 8]})", d16),
       {"w.weight", "begin > end"}},
      {"end_past_data",
       one(R"({"dtype": "F32", "shape": [8], "data_offsets": [0, 32]})", d16),
       {"w.weight", "past the data section"}},
      {"size_mismatch",
       one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 16]})", d16),
       {"w.weight", "needs 12"}},
      {"numel_overflow",
       one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]})", d16),
       {"w.weight", "2^64"}},
      {"overlap",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                         d16),
       {"'a'", "'b'", "overlap"}},
      {"metadata_type",
       safetensors_bytes(R"({"__metadata__": {"n": 3}})", ""),
       {"__metadata__", "'n'"}},
  };
}

TEST(Safetensors, CorruptHeadersNameFileAndTensor) {
  TempDir dir;
  for (const auto& c : corrupt_cases()) {
    SCOPED_TRACE(c.label);
    auto path = dir / (std::string(c.label) + ".safetensors");
    write_bytes(path, c.bytes);
    std::string msg = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_THAT(msg, HasSubstr(path.string()));
    for (const auto& s : c.expected) EXPECT_THAT(msg, HasSubstr(s));
  }
}

// The header is parsed with a nesting limit: error messages dump() header values, and a dump of
// a value nested a million deep recursed until the stack ran out (found by fuzz_safetensors).
TEST(Safetensors, DeeplyNestedHeaderIsAnError) {
  TempDir dir;
  auto path = dir / "deep.safetensors";
  const size_t depth = 1'000'000;
  const std::string shape = std::string(depth, '[') + std::string(depth, ']');
  write_bytes(path, safetensors_bytes(R"({"w": {"dtype": "F32", "shape": )" + shape +
                                          R"(, "data_offsets": [0, 0]}})",
                                      ""));
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr("deeper than 128"));
}

// safetensors_parse, what open() runs over its mapping, reads an image in memory the same way.
TEST(Safetensors, ParsesAnImageInMemory) {
  const std::string bytes = make_safetensors(sample_tensors(), {{"format", "pt"}});
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const SafetensorsContents c = safetensors_parse(data, bytes.size(), "in-memory");
  ASSERT_EQ(c.tensors.size(), 6u);
  EXPECT_EQ(c.metadata.at("format"), "pt");
  for (const auto& t : c.tensors) {
    EXPECT_GE(static_cast<const uint8_t*>(t.data), data);
    EXPECT_LE(static_cast<const uint8_t*>(t.data) + t.nbytes, data + bytes.size());
  }
  EXPECT_THAT(error_of([&] { safetensors_parse(data, 7, "in-memory"); }),
              HasSubstr("in-memory: file is 7 bytes"));
}

TEST(Safetensors, MissingFileAndDirectoryAreErrors) {
  TempDir dir;
  auto path = dir / "nope.safetensors";
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path); }), HasSubstr(path.string()));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(dir.path()); }), HasSubstr("not a regular"));
}

TEST(Safetensors, EveryTruncationErrors) {
  TempDir dir;
  const std::string full = make_safetensors(sample_tensors());
  auto path = dir / "cut.safetensors";
  for (size_t len = 0; len < full.size(); ++len) {
    write_bytes(path, full.substr(0, len));
    bool threw = false;
    try {
      SafetensorsFile::open(path);
    } catch (const Error& e) {
      threw = true;
      EXPECT_THAT(e.what(), HasSubstr(path.string())) << "cut at " << len;
    }
    EXPECT_TRUE(threw) << "cut at " << len << " of " << full.size() << " parsed";
  }
  write_bytes(path, full);
  EXPECT_EQ(SafetensorsFile::open(path).tensors().size(), 6u);
}

// Random byte flips in the header: may parse or fail, but only ever with a hearth::Error, and
// whatever parses must stay inside the file.
TEST(Safetensors, RandomCorruptionNeverCrashes) {
  TempDir dir;
  const std::string full = make_safetensors(sample_tensors());
  auto path = dir / "fuzz.safetensors";
  std::mt19937 rng(1234);
  const char alphabet[] = "{}[]\":,0123456789-eE.FIBU \x00\xff";
  int parsed = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string bytes = full;
    int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t pos = rng() % std::min<size_t>(bytes.size(), 400);
      bytes[pos] = (rng() % 2) ? char(rng()) : alphabet[rng() % (sizeof(alphabet) - 1)];
    }
    write_bytes(path, bytes);
    try {
      auto file = SafetensorsFile::open(path);
      ++parsed;
      for (const auto& t : file.tensors()) {
        // Touch every byte: ASan would flag anything outside the mapping.
        unsigned sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<const uint8_t*>(t.data)[i];
        (void)sum;
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);  // some flips land in data or padding
}

// ---- WeightStore ------------------------------------------------------------------------------

TEST(WeightStore, SingleFileTakeAndAudit) {
  TempDir dir;
  write_bytes(dir / "model.safetensors", make_safetensors(sample_tensors()));
  auto store = WeightStore::open(dir.path());
  EXPECT_EQ(store.names(),
            (std::vector<std::string>{"bf16", "empty", "f16", "f32", "i32", "scalar"}));
  EXPECT_TRUE(store.contains("f32"));
  EXPECT_FALSE(store.contains("nope"));
  ASSERT_NE(store.find("bf16"), nullptr);
  EXPECT_EQ(store.find("bf16")->file, (dir / "model.safetensors").string());
  EXPECT_EQ(store.total_bytes(), 24u + 12u + 12u + 16u + 4u);
  EXPECT_EQ(store.total_params(), 6 + 6 + 6 + 4 + 1);
  EXPECT_EQ(store.bytes_by_dtype().at(DType::BF16), 12u);
  EXPECT_EQ(store.bytes_by_dtype().at(DType::F32), 28u);

  Tensor w = store.take("f32", {2, -1});
  EXPECT_EQ(w.ndim, 2);
  EXPECT_EQ(w.dim(0), 2);
  EXPECT_EQ(w.dim(1), 3);
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.as<float>()[3], 3.25f);
  EXPECT_TRUE(store.take_optional("absent", {1}).empty());
  Tensor s = store.take_optional("scalar", {});
  EXPECT_EQ(s.ndim, 0);
  EXPECT_EQ(*s.as<float>(), 42.0f);

  std::string msg = error_of([&] { store.take("missing.weight", {4, 4}); });
  EXPECT_THAT(msg, HasSubstr("missing.weight"));
  EXPECT_THAT(msg, HasSubstr("missing"));
  msg = error_of([&] { store.take("bf16", {2, 3}, "hidden_size=3"); });
  EXPECT_THAT(msg, HasSubstr("tensor bf16 has shape [3, 2], expected [2, 3] (from config: "
                             "hidden_size=3)"));
  msg = error_of([&] { store.take("f16", {6, 1}); });
  EXPECT_THAT(msg, HasSubstr("tensor f16 has shape [6], expected [6, 1]"));
  // Only -1 is a wildcard: a config-derived size gone negative never matches.
  msg = error_of([&] { store.take("f16", {-7}, "hidden_size"); });
  EXPECT_THAT(msg, HasSubstr("tensor f16: the shape expected from config (hidden_size) has a "
                             "negative size, -7"));

  msg = error_of([&] { store.audit(); });
  // bf16 failed its shape check, so it is not taken; f16 too.
  EXPECT_THAT(msg, HasSubstr("unused tensor(s) in checkpoint"));
  EXPECT_THAT(msg, HasSubstr("bf16, empty, f16, i32 (4 total)"));
  EXPECT_EQ(store.ignore_prefix("f"), 1u);  // f16 (f32 already taken)
  EXPECT_EQ(store.unused(), (std::vector<std::string>{"bf16", "empty", "i32"}));
  store.take("bf16", {3, 2});
  store.take("bf16", {-1, -1});  // taking twice is fine (tied weights)
  store.take("i32", {1, 2, 2});
  store.take("empty", {0, 4});
  EXPECT_NO_THROW(store.audit());
}

TEST(WeightStore, RenameAndMove) {
  TempDir dir;
  write_bytes(dir / "weights.safetensors", make_safetensors(sample_tensors()));
  auto store = WeightStore::open(dir.path());  // any single *.safetensors
  store.rename("f32", "model.f32");
  EXPECT_FALSE(store.contains("f32"));
  ASSERT_TRUE(store.contains("model.f32"));
  EXPECT_EQ(store.find("model.f32")->name, "model.f32");
  EXPECT_THAT(error_of([&] { store.rename("bf16", "f16"); }), HasSubstr("already exists"));
  EXPECT_THAT(error_of([&] { store.rename("nope", "x"); }), HasSubstr("nope"));

  // The mapping outlives moves of the store.
  WeightStore moved = std::move(store);
  WeightStore target = WeightStore::open(dir.path());
  target = std::move(moved);
  Tensor w = target.take("model.f32", {2, 3});
  EXPECT_EQ(w.as<float>()[2], 2.0f);
}

TEST(WeightStore, ShardedIndex) {
  TempDir dir;
  write_bytes(dir / "model-00001-of-00002.safetensors",
              make_safetensors({{"a", "F32", {2}, raw(std::vector<float>{1, 2})},
                                {"b", "F32", {1}, raw(std::vector<float>{3})}}));
  write_bytes(dir / "model-00002-of-00002.safetensors",
              make_safetensors({{"c", "I32", {3}, raw(std::vector<int32_t>{4, 5, 6})}}));
  nlohmann::json index = {{"metadata", {{"total_size", 24}}},
                          {"weight_map",
                           {{"a", "model-00001-of-00002.safetensors"},
                            {"b", "model-00001-of-00002.safetensors"},
                            {"c", "model-00002-of-00002.safetensors"}}}};
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  {
    auto store = WeightStore::open(dir.path());
    EXPECT_EQ(store.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(store.take("c", {3}).as<int32_t>()[2], 6);
    EXPECT_EQ(store.take("b", {1}).as<float>()[0], 3.0f);
    EXPECT_THAT(store.find("c")->file, HasSubstr("model-00002-of-00002"));
    EXPECT_THAT(error_of([&] { store.audit(); }), HasSubstr("a (1 total)"));
  }

  // A tensor listed in the index but absent from its shard.
  index["weight_map"]["d"] = "model-00002-of-00002.safetensors";
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  std::string msg = error_of([&] { WeightStore::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("'d'"));
  EXPECT_THAT(msg, HasSubstr("model-00002-of-00002.safetensors"));

  // A shard listed but missing.
  index["weight_map"]["d"] = "model-00003-of-00002.safetensors";
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  msg = error_of([&] { WeightStore::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("model-00003-of-00002.safetensors"));
  EXPECT_THAT(msg, HasSubstr("missing"));

  // The same name in two shards.
  index["weight_map"].erase("d");
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  write_bytes(dir / "model-00002-of-00002.safetensors",
              make_safetensors({{"c", "I32", {3}, raw(std::vector<int32_t>{4, 5, 6})},
                                {"a", "F32", {2}, raw(std::vector<float>{1, 2})}}));
  msg = error_of([&] { WeightStore::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("'a'"));
  EXPECT_THAT(msg, HasSubstr("two files"));

  // A broken index names itself.
  write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": 3}");
  EXPECT_THAT(error_of([&] { WeightStore::open(dir.path()); }),
              HasSubstr("model.safetensors.index.json"));
  // Nested past the JSON depth limit: refused at the parse, before anything walks it.
  write_bytes(dir / "model.safetensors.index.json",
              "{\"weight_map\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  msg = error_of([&] { WeightStore::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(msg, HasSubstr("nested deeper than"));
  write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_THAT(error_of([&] { WeightStore::open(dir.path()); }), HasSubstr("not valid JSON"));
}

TEST(WeightStore, SeveralFilesWithoutIndex) {
  TempDir dir;
  write_bytes(dir / "x.safetensors", make_safetensors({{"x", "U8", {2}, "ab"}}));
  write_bytes(dir / "y.safetensors", make_safetensors({{"y", "U8", {1}, "c"}}));
  EXPECT_EQ(WeightStore::open(dir.path()).names(), (std::vector<std::string>{"x", "y"}));
  write_bytes(dir / "z.safetensors", make_safetensors({{"x", "U8", {1}, "d"}}));
  EXPECT_THAT(error_of([&] { WeightStore::open(dir.path()); }), HasSubstr("'x'"));
  // model.safetensors wins over the others.
  write_bytes(dir / "model.safetensors", make_safetensors({{"m", "U8", {1}, "e"}}));
  EXPECT_EQ(WeightStore::open(dir.path()).names(), (std::vector<std::string>{"m"}));
}

TEST(WeightStore, MissingOrEmptyDirectory) {
  TempDir dir;
  auto missing = dir / "no_such_model";
  EXPECT_THAT(error_of([&] { WeightStore::open(missing); }), HasSubstr(missing.string()));
  write_bytes(dir / "config.json", "{}");
  std::string msg = error_of([&] { WeightStore::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr(dir.path().string()));
  EXPECT_THAT(msg, HasSubstr("no .safetensors"));
  // A corrupt shard names the shard.
  write_bytes(dir / "model.safetensors", "garbage!garbage");
  EXPECT_THAT(error_of([&] { WeightStore::open(dir.path()); }), HasSubstr("model.safetensors"));
}

TEST(WeightStore, MisalignedDataIsRejectedAtTake) {
  TempDir dir;
  // An unpadded header puts the F32 data at an odd address; the parse is fine, take() is not.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  while ((8 + header.size()) % 4 != 1) header += ' ';
  std::string bytes = safetensors_bytes(header, std::string(8, '\0'), 1);
  write_bytes(dir / "model.safetensors", bytes);
  auto store = WeightStore::open(dir.path());
  EXPECT_THAT(error_of([&] { store.take("w", {2}); }), HasSubstr("not aligned"));
}

}  // namespace
}  // namespace hearth

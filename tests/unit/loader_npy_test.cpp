// .npy round trips, byte layout (64-byte aligned v1.0 header) and rejection of what we do not read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "loader/npy.h"
#include "loader_test_util.h"

namespace hearth {
namespace {

using test::error_of;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

// A v1.0 npy file with an arbitrary header dict and data.
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

TEST(Npy, F32RoundTripAndLayout) {
  TempDir dir;
  auto path = dir / "a.npy";
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  npy_write_f32(path, values.data(), {2, 3});
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ((bytes.size() - 24) % 64, 0u);  // data starts on a 64-byte boundary
  EXPECT_THAT(bytes, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));

  NpyArray arr = npy_read(path);
  EXPECT_TRUE(arr.is_float());
  EXPECT_EQ(arr.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(arr.numel(), 6);
  EXPECT_EQ(arr.f32, values);

  npy_write_f32(path, values.data(), {6});
  EXPECT_THAT(read_bytes(path), HasSubstr("'shape': (6,), }"));
  EXPECT_EQ(npy_read(path).shape, (std::vector<int64_t>{6}));
  npy_write_f32(path, values.data(), {});
  arr = npy_read(path);
  EXPECT_TRUE(arr.shape.empty());
  EXPECT_EQ(arr.f32, (std::vector<float>{1.5f}));
  npy_write_f32(path, values.data(), {0, 3});
  arr = npy_read(path);
  EXPECT_EQ(arr.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(arr.f32.empty());
}

TEST(Npy, IntsAreWidened) {
  TempDir dir;
  auto path = dir / "ids.npy";
  std::vector<int32_t> ids = {0, 151643, -1, 2147483647};
  npy_write_i32(path, ids.data(), {4});
  NpyArray arr = npy_read(path);
  EXPECT_EQ(arr.dtype, DType::I32);
  EXPECT_FALSE(arr.is_float());
  EXPECT_EQ(arr.ints, (std::vector<int64_t>{0, 151643, -1, 2147483647}));

  std::vector<int64_t> big = {5, -(int64_t(1) << 40)};
  write_bytes(path, npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }",
                              test::raw(big)));
  arr = npy_read(path);
  EXPECT_EQ(arr.dtype, DType::I64);
  EXPECT_EQ(arr.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(arr.ints, big);
}

TEST(Npy, RejectsWhatItCannotRead) {
  TempDir dir;
  auto path = dir / "bad.npy";
  const std::string p = path.string();
  EXPECT_THAT(error_of([&] { npy_read(dir / "missing.npy"); }), HasSubstr("missing.npy"));
  struct Case {
    const char* label;
    std::string bytes;
    const char* expected;
  } cases[] = {
      {"magic", "NOTNUMPYATALL", "magic"},
      {"short", "\x93NUM", "magic"},
      {"f8", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", "12345678"),
       "'<f8'"},
      {"big_endian", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "1234"),
       "'>f4'"},
      {"fortran", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "1234"),
       "Fortran"},
      {"size", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "1234"),
       "needs 8"},
      {"shape", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (x,), }", "1234"),
       "shape"},
      {"no_shape", npy_bytes("{'descr': '<f4', 'fortran_order': False, }", "1234"), "shape"},
      {"overflow",
       npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                 "1234"),
       "2^64"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    write_bytes(path, c.bytes);
    std::string msg = error_of([&] { npy_read(path); });
    EXPECT_THAT(msg, HasSubstr(p));
    EXPECT_THAT(msg, HasSubstr(c.expected));
  }
  // Every truncation of a valid file is an error.
  std::vector<float> v = {1, 2, 3};
  npy_write_f32(path, v.data(), {3});
  const std::string full = read_bytes(path);
  for (size_t len = 0; len < full.size(); ++len) {
    write_bytes(path, full.substr(0, len));
    EXPECT_THROW(npy_read(path), Error) << "cut at " << len;
  }
}

}  // namespace
}  // namespace hearth

// Test helpers for the loader: the message of an expected error, a self-deleting temp directory
// and a byte-level safetensors writer (so tests control every byte, including broken headers).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace hearth::test {

// The message of the hearth::Error `fn` throws; fails the test if it throws nothing.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected hearth::Error";
  return "";
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("hearth_loader_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// u64 little-endian header length + header (padded with spaces to `pad`) + data.
inline std::string safetensors_bytes(const std::string& header, const std::string& data,
                                     size_t pad = 8) {
  std::string h = header;
  while ((8 + h.size()) % pad) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = char(n >> (8 * i));
  return out + h + data;
}

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// A valid safetensors file: tensors laid out back to back in the given order.
inline std::string make_safetensors(const std::vector<StTensor>& tensors,
                                    const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return safetensors_bytes(header.dump(), data);
}

}  // namespace hearth::test

// .npy reading and writing. Layout: "\x93NUMPY", major, minor, header length (u16 for v1, u32 for
// v2/v3), an ASCII Python dict literal {'descr', 'fortran_order', 'shape'} padded so the data
// starts on a 64-byte boundary, then the raw data. The header is parsed by hand (it is a fixed,
// tiny grammar); every defect is an Error naming the file.
#include "loader/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hearth {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

std::string shape_tuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += std::to_string(shape[i]) + ", ";
  if (shape.size() > 1) s.resize(s.size() - 2);  // "(3,)" keeps its comma, "(2, 3)" does not
  if (shape.size() == 1) s.pop_back();
  return s + ")";
}

void npy_write(const std::filesystem::path& path, const void* data, size_t elem_size,
               const char* descr, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0)
      fail("{}: cannot write npy with negative dim in shape {}", path.string(), shape_tuple(shape));
    numel *= d;
  }
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  // Pad with spaces so magic(6) + version(2) + length(2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) fail("{}: npy header too long", path.string());

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot open {} for writing", path.string());
  out.write(kMagic.data(), std::streamsize(kMagic.size()));
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = uint16_t(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(data), std::streamsize(size_t(numel) * elem_size));
  out.flush();
  if (!out) fail("error writing {}", path.string());
}

// Returns the text after "'key':" (skipping spaces), or fails.
std::string_view dict_value(std::string_view header, std::string_view key,
                            const std::string& file) {
  std::string quoted;
  quoted.reserve(key.size() + 2);
  quoted.push_back('\'');
  quoted.append(key);
  quoted.push_back('\'');
  size_t pos = header.find(quoted);
  if (pos == std::string_view::npos) fail("{}: npy header lacks '{}'", file, key);
  pos = header.find(':', pos + quoted.size());
  if (pos == std::string_view::npos) fail("{}: npy header malformed near '{}'", file, key);
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  return header.substr(pos);
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void npy_write_f32(const std::filesystem::path& path, const float* data,
                   const std::vector<int64_t>& shape) {
  npy_write(path, data, 4, "<f4", shape);
}

void npy_write_i32(const std::filesystem::path& path, const int32_t* data,
                   const std::vector<int64_t>& shape) {
  npy_write(path, data, 4, "<i4", shape);
}

NpyArray npy_read(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();

  if (bytes.size() < 10 || std::string_view(bytes).substr(0, 6) != kMagic)
    fail("{}: not an npy file (bad magic)", file);
  const int major = uint8_t(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail("{}: truncated npy header", file);
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | uint8_t(bytes[8 + i]);
    header_start = 12;
  } else {
    fail("{}: unsupported npy version {}", file, major);
  }
  if (header_len > bytes.size() - header_start) fail("{}: truncated npy header", file);
  const std::string_view header(bytes.data() + header_start, header_len);

  NpyArray arr;
  std::string_view descr = dict_value(header, "descr", file);
  size_t elem_size = 0;
  if (descr.starts_with("'<f4'")) {
    arr.dtype = DType::F32;
    elem_size = 4;
  } else if (descr.starts_with("'<i4'")) {
    arr.dtype = DType::I32;
    elem_size = 4;
  } else if (descr.starts_with("'<i8'")) {
    arr.dtype = DType::I64;
    elem_size = 8;
  } else {
    fail("{}: unsupported npy dtype {} (supported: '<f4', '<i4', '<i8')", file,
         descr.substr(0, descr.find_first_of(",}")));
  }
  std::string_view order = dict_value(header, "fortran_order", file);
  if (order.starts_with("True")) fail("{}: Fortran-order npy arrays are not supported", file);
  if (!order.starts_with("False")) fail("{}: npy header has a malformed fortran_order", file);

  std::string_view shape = dict_value(header, "shape", file);
  if (!shape.starts_with("(")) fail("{}: npy header has a malformed shape", file);
  size_t close = shape.find(')');
  if (close == std::string_view::npos) fail("{}: npy header has a malformed shape", file);
  shape = shape.substr(1, close - 1);
  uint64_t numel = 1;
  bool overflow = false;
  size_t pos = 0;
  while (pos < shape.size()) {
    while (pos < shape.size() && (shape[pos] == ' ' || shape[pos] == ',')) ++pos;
    if (pos >= shape.size()) break;
    int64_t dim = 0;
    size_t digits = 0;
    while (pos < shape.size() && shape[pos] >= '0' && shape[pos] <= '9') {
      overflow |= __builtin_mul_overflow(dim, int64_t(10), &dim);
      overflow |= __builtin_add_overflow(dim, int64_t(shape[pos] - '0'), &dim);
      ++pos;
      ++digits;
    }
    if (digits == 0) fail("{}: npy header has a malformed shape ({})", file, shape);
    // 'L' suffixes come from Python 2 writers.
    if (pos < shape.size() && shape[pos] == 'L') ++pos;
    arr.shape.push_back(dim);
    overflow |= __builtin_mul_overflow(numel, uint64_t(dim), &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(elem_size), &nbytes);
  const size_t data_start = header_start + header_len;
  const size_t available = bytes.size() - data_start;
  if (overflow || nbytes != available)
    fail("{}: npy data is {} bytes, but shape ({}) needs {}", file, available, shape,
         overflow ? std::string("more than 2^64") : std::to_string(nbytes));

  const char* data = bytes.data() + data_start;
  if (arr.dtype == DType::F32) {
    arr.f32.resize(numel);
    if (numel) std::memcpy(arr.f32.data(), data, nbytes);
  } else if (arr.dtype == DType::I32) {
    arr.ints.resize(numel);
    for (size_t i = 0; i < numel; ++i) {
      int32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      arr.ints[i] = v;
    }
  } else {
    arr.ints.resize(numel);
    if (numel) std::memcpy(arr.ints.data(), data, nbytes);
  }
  return arr;
}

}  // namespace hearth

// Safetensors parsing. Layout: u64 little-endian header length N, N bytes of JSON header, then the
// data section; each header entry gives dtype, shape and [begin, end) byte offsets into the data
// section. Everything in the header is untrusted: each check below turns a defect into an Error
// naming the file and tensor rather than an out-of-bounds read later.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/tensor.h"

namespace hearth {

using json = nlohmann::json;

// ---- MappedFile -------------------------------------------------------------------------------

MappedFile::MappedFile(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path.string(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot read {}: not a regular file", path.string());
  }
  size_ = size_t(st.st_size);
  // mmap rejects length 0; an empty file simply has no bytes to map.
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("cannot mmap {} ({} bytes): {}", path.string(), size_, std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

// ---- header validation ------------------------------------------------------------------------

namespace {

// Safetensors dtypes that exist in the format but that hearth does not load.
constexpr std::array<std::string_view, 8> kUnsupportedDTypes = {
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", "F8_E4M3FN"};

const char* json_type(const json& j) { return j.type_name(); }

// A JSON value for a message, cut short: a hostile header can hold megabytes in one field.
std::string short_dump(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// A non-negative JSON integer as uint64, or false.
bool json_to_u64(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    out = uint64_t(v);
    return true;
  }
  return false;
}

SafetensorsTensor parse_entry(const std::string& file, const std::string& name, const json& entry,
                              const uint8_t* data_section, size_t data_size) {
  if (!entry.is_object())
    fail("{}: tensor '{}': header entry is a {}, expected an object", file, name, json_type(entry));
  auto field = [&](const char* key) -> const json& {
    auto it = entry.find(key);
    if (it == entry.end()) fail("{}: tensor '{}': header entry lacks '{}'", file, name, key);
    return *it;
  };
  const json& dtype_j = field("dtype");
  const json& shape_j = field("shape");
  const json& offsets_j = field("data_offsets");

  SafetensorsTensor t;
  t.name = name;

  if (!dtype_j.is_string())
    fail("{}: tensor '{}': dtype is a {}, expected a string", file, name, json_type(dtype_j));
  const std::string& dtype_s = dtype_j.get_ref<const std::string&>();
  auto dtype = dtype_from_name(dtype_s);
  if (!dtype) {
    bool known = std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(), dtype_s) !=
                 kUnsupportedDTypes.end();
    fail("{}: tensor '{}': {} dtype '{}'", file, name, known ? "unsupported" : "unknown", dtype_s);
  }
  t.dtype = *dtype;

  if (!shape_j.is_array())
    fail("{}: tensor '{}': shape is a {}, expected an array", file, name, json_type(shape_j));
  // Up to 8 dims are listed (vision towers hold 5-D conv kernels a text model only skips);
  // WeightStore::take refuses more than Tensor::kMaxDims.
  if (shape_j.size() > 8)
    fail("{}: tensor '{}': {} dims, at most 8 supported", file, name, shape_j.size());
  // numel is computed with overflow checks: a dim of 2^62 must not wrap into a small size.
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape_j) {
    if (!d.is_number_integer())
      fail("{}: tensor '{}': shape {} has a non-integer dim", file, name, short_dump(shape_j));
    if (d.is_number_unsigned() ? d.get<uint64_t>() > uint64_t(INT64_MAX) : false)
      fail("{}: tensor '{}': shape {} has a dim too large", file, name, short_dump(shape_j));
    int64_t v = d.get<int64_t>();
    if (v < 0)
      fail("{}: tensor '{}': shape {} has a negative dim", file, name, short_dump(shape_j));
    t.shape.push_back(v);
    overflow |= __builtin_mul_overflow(numel, uint64_t(v), &numel);
  }
  uint64_t expected_bytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &expected_bytes);

  uint64_t begin = 0, end = 0;
  if (!offsets_j.is_array() || offsets_j.size() != 2 || !json_to_u64(offsets_j[0], begin) ||
      !json_to_u64(offsets_j[1], end))
    fail("{}: tensor '{}': data_offsets {} is not [begin, end] of non-negative integers", file,
         name, short_dump(offsets_j));
  if (begin > end)
    fail("{}: tensor '{}': data_offsets [{}, {}] has begin > end", file, name, begin, end);
  if (end > data_size)
    fail(
        "{}: tensor '{}': data_offsets [{}, {}] end past the data section ({} bytes; file "
        "truncated?)",
        file, name, begin, end, data_size);
  if (overflow || end - begin != expected_bytes)
    fail("{}: tensor '{}': {} bytes in data_offsets, but shape {} of {} needs {}", file, name,
         end - begin, short_dump(shape_j), dtype_s,
         overflow ? std::string("more than 2^64") : std::to_string(expected_bytes));
  t.offset = size_t(begin);
  t.nbytes = size_t(end - begin);
  t.data = data_section + begin;
  return t;
}

}  // namespace

// ---- parsing ----------------------------------------------------------------------------------

SafetensorsContents safetensors_parse(const uint8_t* bytes, size_t size, const std::string& file) {
  if (size < 8)
    fail("{}: file is {} bytes, too short for the 8-byte safetensors header length", file, size);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  if (header_len > SafetensorsFile::kMaxHeaderBytes)
    fail("{}: header length {} is absurd (more than {} bytes); not a safetensors file?", file,
         header_len, SafetensorsFile::kMaxHeaderBytes);
  if (header_len > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes; truncated?)", file,
         header_len, size);

  // Bounded depth: the messages below dump() header values, and dump() recurses per level.
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), size_t(header_len));
  json root;
  const JsonParseStatus parsed = parse_json_bounded(header, root);
  if (parsed == JsonParseStatus::TooDeep)
    fail("{}: header nests JSON deeper than {} levels", file, kMaxJsonDepth);
  if (parsed == JsonParseStatus::Invalid) {
    std::string why;
    try {
      const json reparsed = json::parse(header);  // throws the reason
      (void)reparsed;
    } catch (const json::exception& e) {
      why = e.what();
    }
    fail("{}: header is not valid JSON: {}", file, why);
  }
  if (!root.is_object())
    fail("{}: header is a JSON {}, expected an object", file, root.type_name());

  SafetensorsContents out;
  const uint8_t* data_section = bytes + 8 + header_len;
  const size_t data_size = size - 8 - size_t(header_len);
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        fail("{}: __metadata__ is a {}, expected an object of strings", file, entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          fail("{}: __metadata__ '{}' is a {}, expected a string", file, key, value.type_name());
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(file, name, entry, data_section, data_size));
  }

  // Overlap check in file order. Empty tensors occupy no bytes and cannot overlap anything.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  const SafetensorsTensor* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const auto& t : out.tensors) {
    if (t.nbytes == 0) continue;
    if (last && t.offset < last->offset + last->nbytes)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, last->name, last->offset,
           last->offset + last->nbytes, t.name, t.offset, t.offset + t.nbytes);
    if (!last || t.offset + t.nbytes > last->offset + last->nbytes) last = &t;
  }
  return out;
}

// ---- SafetensorsFile --------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.map_ = MappedFile(path);
  SafetensorsContents contents = safetensors_parse(f.map_.data(), f.map_.size(), path.string());
  f.tensors_ = std::move(contents.tensors);
  f.metadata_ = std::move(contents.metadata);
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace hearth

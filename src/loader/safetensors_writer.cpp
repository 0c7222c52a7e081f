#include "loader/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hearth {

namespace {

// Writes all of [data, data + n) at `offset`; pwrite may write less than asked.
void pwrite_all(int fd, const void* data, size_t n, size_t offset, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    const ssize_t done = ::pwrite(fd, p, chunk, off_t(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail("cannot write {}: {}", what, std::strerror(done < 0 ? errno : EIO));
    p += done;
    n -= size_t(done);
    offset += size_t(done);
  }
}

int open_for_writing(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create {}: {}", path.string(), std::strerror(errno));
  return fd;
}

void fsync_fd(int fd, const std::filesystem::path& path) {
  if (::fsync(fd) != 0) fail("cannot flush {} to disk: {}", path.string(), std::strerror(errno));
}

std::string shard_name(size_t i, size_t n) {
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

size_t SafetensorsEntry::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& dir,
                                     std::vector<SafetensorsEntry> entries,
                                     SafetensorsWriterOptions options)
    : dir_(dir) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0 && entries[i].name == entries[i - 1].name)
      fail("safetensors writer: tensor '{}' is given twice", entries[i].name);
    for (int64_t d : entries[i].shape)
      if (d < 0) fail("safetensors writer: tensor '{}' has a negative dim", entries[i].name);
  }

  // Shards hold runs of names, so a tensor's shard follows from its name as in mlx-lm.
  std::vector<std::vector<const SafetensorsEntry*>> shards(1);
  size_t shard_bytes = 0;
  for (const auto& e : entries) {
    if (!shards.back().empty() && shard_bytes + e.nbytes() > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&e);
    shard_bytes += e.nbytes();
    data_bytes_ += e.nbytes();
  }

  try {
    for (size_t s = 0; s < shards.size(); ++s) {
      auto& shard = shards[s];
      // Widest dtype first: each width's run then starts at a multiple of its element size.
      std::stable_sort(shard.begin(), shard.end(), [](const auto* a, const auto* b) {
        return dtype_size(a->dtype) > dtype_size(b->dtype);
      });
      nlohmann::ordered_json header = nlohmann::ordered_json::object();
      if (!options.metadata.empty()) header["__metadata__"] = options.metadata;
      std::map<std::string, nlohmann::ordered_json> by_name;  // the header lists names in order
      size_t offset = 0;
      for (const auto* e : shard) {
        by_name[e->name] = {{"dtype", std::string(dtype_name(e->dtype))},
                            {"shape", e->shape},
                            {"data_offsets", {offset, offset + e->nbytes()}}};
        offset += e->nbytes();
      }
      for (auto& [name, value] : by_name) header[name] = std::move(value);
      std::string text = header.dump();
      text.append((8 - text.size() % 8) % 8, ' ');  // 8 + size is then a multiple of 8 too

      File file{dir_ / shard_name(s, shards.size()), -1, 8 + text.size() + offset};
      file.fd = open_for_writing(file.path);
      files_.push_back(file);
      uint8_t len[8];
      for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
      pwrite_all(file.fd, len, 8, 0, file.path.string());
      pwrite_all(file.fd, text.data(), text.size(), 8, file.path.string());
      size_t at = 8 + text.size();
      for (const auto* e : shard) {
        slots_[e->name] = Slot{s, at, e->nbytes(), 0, false};
        at += e->nbytes();
      }
    }
  } catch (...) {
    for (auto& f : files_) ::close(f.fd);
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  for (auto& f : files_)
    if (f.fd >= 0) ::close(f.fd);
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t nbytes) {
  auto it = slots_.find(name);
  if (it == slots_.end()) fail("safetensors writer: tensor '{}' is not in the layout", name);
  const Slot& slot = it->second;
  if (slot.started) fail("safetensors writer: tensor '{}' is written twice", name);
  if (nbytes != slot.nbytes)
    fail("safetensors writer: tensor '{}' has {} bytes, the layout says {}", name, nbytes,
         slot.nbytes);
  write_part(name, data, nbytes);
}

void SafetensorsWriter::write_part(const std::string& name, const void* data, size_t nbytes) {
  auto it = slots_.find(name);
  if (it == slots_.end()) fail("safetensors writer: tensor '{}' is not in the layout", name);
  Slot& slot = it->second;
  if (nbytes > slot.nbytes - slot.written)
    fail("safetensors writer: tensor '{}' gets {} more bytes after {}, the layout says {} in all",
         name, nbytes, slot.written, slot.nbytes);
  const File& file = files_[slot.file];
  pwrite_all(file.fd, data, nbytes, slot.offset + slot.written,
             fmt::format("tensor '{}' to {}", name, file.path.string()));
  slot.written += nbytes;
  slot.started = true;
}

std::vector<std::filesystem::path> SafetensorsWriter::finish() {
  if (finished_) fail("safetensors writer: finish() called twice");
  for (const auto& [name, slot] : slots_)
    if (!slot.started || slot.written != slot.nbytes)
      fail("safetensors writer: tensor '{}' was {} ({} of {} bytes)", name,
           slot.started ? "written in part" : "never written", slot.written, slot.nbytes);
  std::vector<std::filesystem::path> paths;
  for (auto& f : files_) {
    fsync_fd(f.fd, f.path);
    if (::close(f.fd) != 0) fail("cannot close {}: {}", f.path.string(), std::strerror(errno));
    f.fd = -1;
    paths.push_back(f.path);
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", data_bytes_}};
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (const auto& [name, slot] : slots_) map[name] = files_[slot.file].path.filename().string();
  index["weight_map"] = std::move(map);
  const auto path = dir_ / "model.safetensors.index.json";
  write_file_durably(path, index.dump(4) + "\n");
  paths.push_back(path);
  finished_ = true;
  return paths;
}

size_t SafetensorsWriter::file_bytes() const {
  size_t n = 0;
  for (const auto& f : files_) n += f.size;
  return n;
}

void write_file_durably(const std::filesystem::path& path, std::string_view bytes) {
  const int fd = open_for_writing(path);
  try {
    pwrite_all(fd, bytes.data(), bytes.size(), 0, path.string());
    fsync_fd(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("cannot close {}: {}", path.string(), std::strerror(errno));
}

void fsync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("cannot flush {} to disk: {}", path.string(), std::strerror(err));
}

}  // namespace hearth

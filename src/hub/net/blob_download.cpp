#include "hub/net/blob_download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace fs = std::filesystem;

namespace hearth::hub {

namespace {

// Attempts of one file in a row that receive nothing before the download gives up; an attempt
// that received bytes (a cut connection) starts the count again, up to kMaxAttempts in all.
constexpr int kMaxFruitlessAttempts = 5;
constexpr int kMaxAttempts = 50;

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The hash the file's etag is: sha256 of the contents (LFS), or git's blob sha1 (sha1 of
// "blob {size}\0" then the contents). An etag of another shape (a mirror's own) is not checked.
class ContentHash {
 public:
  explicit ContentHash(const RemoteFile& f) : size_(f.size) {
    if (is_hex(f.etag, 64))
      md_ = EVP_sha256();
    else if (is_hex(f.etag, 40))
      md_ = EVP_sha1(), git_blob_ = true;
    ctx_ = EVP_MD_CTX_new();
    if (!ctx_) fail("cannot start a hash (EVP_MD_CTX_new failed)");
    reset();
  }
  ~ContentHash() { EVP_MD_CTX_free(ctx_); }
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;

  bool checks() const { return md_ != nullptr; }
  const char* name() const { return git_blob_ ? "git blob sha1" : "sha256"; }
  void reset() {
    if (!md_) return;
    EVP_DigestInit_ex(ctx_, md_, nullptr);
    if (git_blob_) {
      const std::string prefix = "blob " + std::to_string(size_);
      update(prefix.data(), prefix.size() + 1);  // with its NUL
    }
  }
  void update(const void* data, size_t n) {
    if (md_) EVP_DigestUpdate(ctx_, data, n);
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, digest, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) out += digits[digest[i] >> 4], out += digits[digest[i] & 15];
    return out;
  }

 private:
  uint64_t size_;
  const EVP_MD* md_ = nullptr;
  bool git_blob_ = false;
  EVP_MD_CTX* ctx_ = nullptr;
};

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

uint64_t fd_size(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? uint64_t(st.st_size) : 0;
}

// Feeds the first `n` bytes of the file to the hash (the part a resumed download keeps).
void hash_prefix(const fs::path& path, uint64_t n, ContentHash& hash) {
  Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) fail("cannot read {}: {}", path.string(), std::strerror(errno));
  std::vector<char> buf(size_t{1} << 20);
  while (n > 0) {
    const ssize_t got = ::read(in.fd, buf.data(), std::min<uint64_t>(n, buf.size()));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail("cannot read {}: {}", path.string(), got < 0 ? std::strerror(errno) : "short");
    hash.update(buf.data(), size_t(got));
    n -= uint64_t(got);
  }
}

void write_all(int fd, const char* data, size_t n, const fs::path& path, uint64_t still_needed) {
  while (n > 0) {
    const ssize_t put = ::write(fd, data, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == ENOSPC || errno == EDQUOT))
      fail(
          "disk full writing {} ({} still to write): free some space and run the pull again "
          "(it resumes)",
          path.string(), format_bytes(still_needed));
    if (put < 0) fail("cannot write {}: {}", path.string(), std::strerror(errno));
    data += put;
    n -= size_t(put);
  }
}

// Holds the cache's lock file of one blob (flock, as huggingface_hub's filelock takes it).
class BlobLock {
 public:
  BlobLock(const fs::path& path, const std::string& what, const DownloadEvents& events) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the lock file {}: {}", path.string(), std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (events.note) events.note(fmt::format("{}: waiting for another download of it", what));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("cannot lock {}: {}", path.string(), std::strerror(errno));
  }
  ~BlobLock() { ::close(fd_); }  // closing releases the lock
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

bool blob_present(const fs::path& blob, uint64_t size) {
  std::error_code ec;
  return fs::is_regular_file(blob, ec) && fs::file_size(blob, ec) == size && !ec;
}

}  // namespace

uint64_t download_blob(HttpClient& http, const HubTarget& target, const std::string& url,
                       const RemoteFile& file, const RepoCache& repo,
                       const DownloadEvents& events) {
  const fs::path blob = repo.blob_path(file.etag);
  if (blob_present(blob, file.size)) return 0;
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  if (ec) fail("cannot create {}: {}", blob.parent_path().string(), ec.message());
  BlobLock lock(repo.lock_path(file.etag), file.path, events);
  if (blob_present(blob, file.size)) return 0;  // the other download finished it

  const fs::path part = repo.incomplete_path(file.etag);
  auto report = [&](int64_t on_disk, uint64_t network) {
    if (events.bytes) events.bytes(on_disk, network);
  };
  ContentHash hash(file);
  uint64_t received_total = 0;
  bool restarted_after_mismatch = false;
  int fruitless = 0;
  double wait_s = 0.5;
  for (int attempt = 1;; ++attempt) {
    Fd out(::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (out.fd < 0) fail("cannot write {}: {}", part.string(), std::strerror(errno));
    uint64_t have = fd_size(out.fd);
    if (have > file.size) {  // not this file's prefix: start over
      if (::ftruncate(out.fd, 0) != 0) fail("cannot truncate {}", part.string());
      have = 0;
    }
    const uint64_t resumed_from = have;
    if (attempt == 1) report(int64_t(have), 0);
    hash.reset();
    if (have > 0) hash_prefix(part, have, hash);
    if (::lseek(out.fd, off_t(have), SEEK_SET) < 0) fail("cannot seek in {}", part.string());

    std::string retry_why;
    uint64_t received = 0;
    if (have < file.size || file.size == 0) {
      HttpRequest req;
      req.url = url;
      req.bearer_token = target.token;
      if (have > 0) req.range_start = have;
      req.on_body = [&](const HttpResponse& head, const char* data, size_t n) {
        if (!data) {  // the head of a success answer
          if (head.status == 200 && have > 0) {
            // The server ignored the Range: the whole file comes again.
            if (::ftruncate(out.fd, 0) != 0 || ::lseek(out.fd, 0, SEEK_SET) < 0)
              fail("cannot truncate {}", part.string());
            report(-int64_t(have), 0);
            have = 0;
            hash.reset();
          } else if (head.status == 206 &&
                     head.header("content-range").rfind(fmt::format("bytes {}-", have), 0) != 0) {
            throw TransportError(fmt::format("{}: asked for bytes {}- and got '{}'", url, have,
                                             head.header("content-range")),
                                 true);
          }
          return true;
        }
        if (have + n > file.size)
          fail("{}: the server sends more than the listed {} bytes", file.path, file.size);
        write_all(out.fd, data, n, part, file.size - have);
        hash.update(data, n);
        have += n;
        received += n;
        report(int64_t(n), n);
        return true;
      };
      try {
        const HttpResponse r = http.perform(req);
        if (r.status == 416 && have == file.size) {
          // Already whole: the Range asked for nothing.
        } else if (r.status == 429 || r.status >= 500) {
          retry_why = fmt::format("HTTP {}", r.status);
        } else if (r.status != 200 && r.status != 206) {
          if (r.status == 416) {  // our partial file does not fit the file: start over
            if (::ftruncate(out.fd, 0) != 0) fail("cannot truncate {}", part.string());
            report(-int64_t(have), 0);
            retry_why = "HTTP 416 for the resumed range";
          } else {
            fail_hub_answer(target, r, file.path);
          }
        } else if (have != file.size) {
          retry_why = fmt::format("the transfer ended at {} of {} bytes", have, file.size);
        }
      } catch (const TransportError& e) {
        if (!e.transient) fail("{}: download failed: {}", file.path, e.what());
        retry_why = e.what();
      }
    }
    received_total += received;

    if (retry_why.empty()) {
      // Whole: check the hash, flush, and put the blob in place.
      if (hash.checks()) {
        const std::string got = hash.hex();
        if (got != file.etag) {
          if (::ftruncate(out.fd, 0) != 0) fail("cannot truncate {}", part.string());
          report(-int64_t(have), 0);
          out.close();
          fs::remove(part, ec);
          // A prefix left by an earlier run may be what is wrong: one fresh try from zero.
          if (resumed_from > 0 && !restarted_after_mismatch) {
            restarted_after_mismatch = true;
            if (events.note)
              events.note(fmt::format("{}: {} mismatch after resuming; downloading it again",
                                      file.path, hash.name()));
            continue;
          }
          fail(
              "{}: {} mismatch (expected {}, got {}): the download is corrupt and was "
              "discarded; run the pull again",
              file.path, hash.name(), file.etag, got);
        }
      }
      if (::fsync(out.fd) != 0 && errno != EINVAL)
        fail("cannot flush {}: {}", part.string(), std::strerror(errno));
      fs::rename(part, blob, ec);
      if (ec) fail("cannot move {} into place: {}", part.string(), ec.message());
      return received_total;
    }

    fruitless = received > 0 ? 0 : fruitless + 1;
    if (received > 0) wait_s = 0.5;
    if (fruitless >= kMaxFruitlessAttempts || attempt >= kMaxAttempts)
      fail("{}: download failed after {} attempts: {} (run the pull again to resume)", file.path,
           attempt, retry_why);
    if (events.note)
      events.note(fmt::format("{}: {}; resuming in {:.1f} s", file.path, retry_why, wait_s));
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    wait_s = std::min(wait_s * 2, 8.0);
  }
}

}  // namespace hearth::hub

#include "trainrt/train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "trainrt/core/error.h"

namespace trainrt {

namespace {

[[noreturn]] void fail(const std::filesystem::path& file, std::string_view action, int err) {
  throw Error(fmt("could not ", action, " '", file.string(), "': ", std::strerror(err)));
}

// The directory holding `path`, for the fsync that makes a rename durable.
std::filesystem::path parent_directory(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), tmp_path_(path_.string() + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(tmp_path_, "create", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t written = ::write(fd_, p, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail(tmp_path_, "write", errno);
    }
    p += written;
    n -= static_cast<size_t>(written);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) fail(tmp_path_, "sync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(tmp_path_, "close", errno);
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) fail(path_, "replace", errno);
  committed_ = true;
  const std::filesystem::path dir = parent_directory(path_);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail(dir, "open directory", errno);
  const int synced = ::fsync(dir_fd);
  const int sync_errno = errno;
  ::close(dir_fd);
  if (synced != 0) fail(dir, "sync directory", sync_errno);
}

}  // namespace trainrt

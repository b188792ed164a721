// Replaces a file all at once: readers see the old content or the complete new one, never a mix.
//
// Use it for files whose loss would hurt (checkpoints). Bytes go to `path.tmp.<pid>` in the same
// directory; commit() fsyncs that file, renames it over `path` (atomic within one file system)
// and fsyncs the directory so the rename survives a crash. A writer destroyed without commit(),
// e.g. by an exception midway, removes its temporary file and leaves `path` as it was.
// I/O failures throw trainrt::Error naming the file and the system's reason.
//
//   AtomicFileWriter out("model.ckpt");
//   out.write(header.data(), header.size());
//   out.write(weights, weight_bytes);
//   out.commit();                                  // now model.ckpt has the new content
#pragma once

#include <cstddef>
#include <filesystem>

namespace trainrt {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void commit();

  const std::filesystem::path& temporary_path() const { return tmp_path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace trainrt

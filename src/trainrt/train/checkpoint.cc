#include "trainrt/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "trainrt/core/error.h"
#include "trainrt/core/shape.h"
#include "trainrt/train/atomic_file.h"
#include "trainrt/train/crc32c.h"

namespace trainrt {

static_assert(std::endian::native == std::endian::little, "the checkpoint writer assumes a little-endian host");

namespace {

constexpr char kMagic[8] = {'T', 'R', 'T', 'C', 'K', 'P', 'T', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kPreambleBytes = 40;
constexpr uint64_t kEntryFixedBytes = 24;  // section, field, dtype, rank, name length, offset, length
constexpr uint64_t kTrailerBytes = 4;
constexpr uint64_t kDataAlignment = 64;

enum Section : uint8_t { kParameter = 1, kOptimizerState = 2, kProperty = 3 };
enum StateField : uint8_t { kStateStep = 1 };  // buffers: kStateBuffers below
enum PropertyKind : uint8_t { kInt = 1, kDouble = 2, kString = 3 };

// OptimizerState's tensors and their field codes.
struct StateBuffer {
  uint8_t field;
  const char* name;
  Tensor OptimizerState::*member;
};
constexpr StateBuffer kStateBuffers[] = {{2, "exp_avg", &OptimizerState::exp_avg},
                                         {3, "exp_avg_sq", &OptimizerState::exp_avg_sq},
                                         {4, "max_exp_avg_sq", &OptimizerState::max_exp_avg_sq},
                                         {5, "momentum_buffer", &OptimizerState::momentum_buffer}};

// One row of the entry table. `data` points at the bytes to save (unused when loading).
struct Entry {
  uint8_t section = 0;
  uint8_t field = 0;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  std::string name;
  uint64_t offset = 0;
  uint64_t length = 0;
  const void* data = nullptr;
};

uint64_t align_up(uint64_t x) { return (x + kDataAlignment - 1) / kDataAlignment * kDataAlignment; }

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// ---------------------------------------------------------------- saving

Entry tensor_entry(uint8_t section, uint8_t field, const std::string& name, const Tensor& t,
                   std::string_view what) {
  if (!t.defined()) throw InvalidModel(fmt("checkpoint: ", what, " '", name, "' is an undefined tensor"));
  return Entry{section, field, t.dtype(), t.dims(), name, 0, t.nbytes(), t.raw()};
}

std::vector<Entry> collect_entries(const CheckpointState& state) {
  std::vector<Entry> entries;
  for (const auto& [name, t] : state.parameters) entries.push_back(tensor_entry(kParameter, 0, name, t, "parameter"));
  for (const auto& [name, s] : state.optimizer_states) {
    entries.push_back(Entry{kOptimizerState, kStateStep, DType::kI64, {}, name, 0, 8, &s.step});
    for (const StateBuffer& b : kStateBuffers)
      if ((s.*b.member).defined())
        entries.push_back(tensor_entry(kOptimizerState, b.field, name, s.*b.member, b.name));
  }
  for (const auto& [name, value] : state.properties) {
    if (const auto* i = std::get_if<int64_t>(&value)) {
      entries.push_back(Entry{kProperty, kInt, DType::kI64, {}, name, 0, 8, i});
    } else if (const auto* d = std::get_if<double>(&value)) {
      entries.push_back(Entry{kProperty, kDouble, DType::kF64, {}, name, 0, 8, d});
    } else {
      const std::string& s = std::get<std::string>(value);
      const std::vector<int64_t> dims{static_cast<int64_t>(s.size())};
      entries.push_back(Entry{kProperty, kString, DType::kU8, dims, name, 0, s.size(), s.data()});
    }
  }
  return entries;
}

// Assigns data offsets after the entry table; returns (table end, file size).
std::pair<uint64_t, uint64_t> lay_out(std::vector<Entry>& entries) {
  uint64_t table_end = kPreambleBytes;
  for (const Entry& e : entries) table_end += kEntryFixedBytes + 8 * e.dims.size() + e.name.size();
  uint64_t end = table_end;
  for (Entry& e : entries) {
    e.offset = align_up(end);
    end = e.offset + e.length;
  }
  return {table_end, end + kTrailerBytes};
}

std::string encode_table(const std::vector<Entry>& entries, int64_t step, uint64_t table_end, uint64_t file_size) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kFormatVersion);
  put<uint32_t>(out, static_cast<uint32_t>(entries.size()));
  put<uint64_t>(out, table_end);
  put<uint64_t>(out, file_size);
  put<int64_t>(out, step);
  for (const Entry& e : entries) {
    put<uint8_t>(out, e.section);
    put<uint8_t>(out, e.field);
    put<uint8_t>(out, static_cast<uint8_t>(dtype_to_onnx(e.dtype)));
    put<uint8_t>(out, static_cast<uint8_t>(e.dims.size()));
    put<uint32_t>(out, static_cast<uint32_t>(e.name.size()));
    put<uint64_t>(out, e.offset);
    put<uint64_t>(out, e.length);
    for (int64_t d : e.dims) put<int64_t>(out, d);
    out += e.name;
  }
  return out;
}

// Writes bytes to the file, keeping the running CRC and position.
class ChecksummedOutput {
 public:
  explicit ChecksummedOutput(AtomicFileWriter& out) : out_(out) {}
  void write(const void* data, uint64_t n) {
    crc_ = crc32c_extend(crc_, data, n);
    out_.write(data, n);
    position_ += n;
  }
  void pad_to(uint64_t offset) {
    static constexpr char kZeros[kDataAlignment] = {};
    write(kZeros, offset - position_);
  }
  uint32_t crc() const { return crc_; }

 private:
  AtomicFileWriter& out_;
  uint32_t crc_ = 0;
  uint64_t position_ = 0;
};

}  // namespace

void CheckpointState::save(const std::filesystem::path& path) const {
  std::vector<Entry> entries = collect_entries(*this);
  if (entries.size() > UINT32_MAX)
    throw InvalidModel(fmt("checkpoint '", path.string(), "': ", entries.size(), " entries, beyond the format's limit"));
  for (const Entry& e : entries)
    if (e.dims.size() > 255 || e.name.size() > UINT32_MAX)
      throw InvalidModel(fmt("checkpoint '", path.string(), "': entry '", e.name, "' has rank ", e.dims.size(),
                             " or a name of ", e.name.size(), " bytes, beyond the format's limits"));
  const auto [table_end, file_size] = lay_out(entries);
  const std::string table = encode_table(entries, step, table_end, file_size);
  AtomicFileWriter file(path);
  ChecksummedOutput out(file);
  out.write(table.data(), table.size());
  for (const Entry& e : entries) {
    out.pad_to(e.offset);
    out.write(e.data, e.length);
  }
  const uint32_t crc = out.crc();
  file.write(&crc, sizeof(crc));
  file.commit();
}

// ---------------------------------------------------------------- loading

namespace {

// The whole file in one 64-byte-aligned buffer that loaded tensors keep alive.
struct FileBytes {
  std::shared_ptr<void> storage;
  uint64_t size = 0;
  const char* data() const { return static_cast<const char*>(storage.get()); }
};

// Checks and decodes one checkpoint file; every failure throws InvalidModel naming the file.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& path) : path_(path.string()) {}

  CheckpointState read() {
    file_ = read_file();
    check_preamble();
    std::vector<Entry> entries = read_table();
    check_data_regions(entries);
    return build_state(entries);
  }

 private:
  [[noreturn]] void corrupt(const std::string& what) const {
    throw InvalidModel(fmt("checkpoint '", path_, "': ", what));
  }

  FileBytes read_file() const;
  void check_preamble();
  std::vector<Entry> read_table();
  Entry read_entry();
  void check_entry_kind(const Entry& e) const;
  void check_data_regions(const std::vector<Entry>& entries) const;
  CheckpointState build_state(const std::vector<Entry>& entries) const;

  // Reads a T at the cursor, within the entry table.
  template <typename T>
  T take(std::string_view what) {
    if (table_end_ - cursor_ < sizeof(T)) corrupt(fmt("entry table ends inside ", what, " at byte ", cursor_));
    T value;
    std::memcpy(&value, file_.data() + cursor_, sizeof(T));
    cursor_ += sizeof(T);
    return value;
  }

  std::string path_;
  FileBytes file_;
  uint64_t cursor_ = 0;
  uint64_t table_end_ = 0;
  uint64_t data_end_ = 0;  // where the trailer starts
  uint32_t entry_count_ = 0;
  int64_t step_ = 0;
};

FileBytes CheckpointReader::read_file() const {
  struct Descriptor {  // closes the file on every way out
    int fd;
    ~Descriptor() {
      if (fd >= 0) ::close(fd);
    }
  } file_fd{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file_fd.fd < 0) corrupt(fmt("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(file_fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) corrupt("not a regular file");
  FileBytes file;
  file.size = static_cast<uint64_t>(st.st_size);
  file.storage = aligned_storage(file.size);
  char* p = static_cast<char*>(file.storage.get());
  for (uint64_t done = 0; done < file.size;) {
    const ssize_t got = ::read(file_fd.fd, p + done, file.size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) corrupt(fmt("read failed: ", std::strerror(errno)));
    if (got == 0) corrupt(fmt("file shrank while reading at byte ", done));
    done += static_cast<uint64_t>(got);
  }
  return file;
}

void CheckpointReader::check_preamble() {
  const uint64_t size = file_.size;
  if (size < sizeof(kMagic) || std::memcmp(file_.data(), kMagic, sizeof(kMagic)) != 0)
    corrupt("not a TrainRT checkpoint (bad magic)");
  if (size < kPreambleBytes + kTrailerBytes)
    corrupt(fmt("truncated: ", size, " bytes, shorter than the ", kPreambleBytes + kTrailerBytes, "-byte minimum"));
  table_end_ = kPreambleBytes;  // lets take() read the preamble
  cursor_ = sizeof(kMagic);
  const uint32_t version = take<uint32_t>("version");
  if (version != kFormatVersion)
    corrupt(fmt("format version ", version, " is not supported (this build reads version ", kFormatVersion, ")"));
  entry_count_ = take<uint32_t>("entry count");
  const uint64_t table_end = take<uint64_t>("table end");
  const uint64_t file_size = take<uint64_t>("file size");
  step_ = take<int64_t>("step");
  if (file_size != size)
    corrupt(fmt(size < file_size ? "truncated" : "trailing bytes", ": the header records ", file_size,
                " bytes, the file has ", size));
  data_end_ = size - kTrailerBytes;
  uint32_t stored_crc;
  std::memcpy(&stored_crc, file_.data() + data_end_, sizeof(stored_crc));
  const uint32_t crc = crc32c_extend(0, file_.data(), data_end_);
  if (crc != stored_crc)
    corrupt(fmt("checksum mismatch (stored ", stored_crc, ", computed ", crc, "): the file is corrupt"));
  if (table_end < kPreambleBytes || table_end > data_end_)
    corrupt(fmt("entry table end ", table_end, " lies outside [", kPreambleBytes, ", ", data_end_, "]"));
  table_end_ = table_end;
}

std::vector<Entry> CheckpointReader::read_table() {
  std::vector<Entry> entries;
  // Each entry takes at least kEntryFixedBytes, which bounds a corrupt count before reserving.
  if (entry_count_ > (table_end_ - kPreambleBytes) / kEntryFixedBytes)
    corrupt(fmt(entry_count_, " entries cannot fit in a ", table_end_ - kPreambleBytes, "-byte entry table"));
  entries.reserve(entry_count_);
  for (uint32_t i = 0; i < entry_count_; ++i) entries.push_back(read_entry());
  if (cursor_ != table_end_) corrupt(fmt("entry table ends at byte ", cursor_, " but the header says ", table_end_));
  return entries;
}

Entry CheckpointReader::read_entry() {
  Entry e;
  e.section = take<uint8_t>("section");
  e.field = take<uint8_t>("field");
  const uint8_t onnx_dtype = take<uint8_t>("dtype");
  const uint8_t rank = take<uint8_t>("rank");
  const uint32_t name_length = take<uint32_t>("name length");
  e.offset = take<uint64_t>("data offset");
  e.length = take<uint64_t>("data length");
  for (uint8_t d = 0; d < rank; ++d) e.dims.push_back(take<int64_t>("dims"));
  if (table_end_ - cursor_ < name_length) corrupt(fmt("entry table ends inside a name at byte ", cursor_));
  e.name.assign(file_.data() + cursor_, name_length);
  cursor_ += name_length;
  const std::string entry = fmt("entry '", e.name, "'");
  try {
    e.dtype = dtype_from_onnx(onnx_dtype);
  } catch (const UnsupportedOp&) {
    corrupt(fmt(entry, ": unknown dtype code ", int{onnx_dtype}));
  }
  int64_t numel = 1;
  for (int64_t d : e.dims) {
    if (d < 0 || (d != 0 && numel > INT64_MAX / static_cast<int64_t>(dtype_size(e.dtype)) / d))
      corrupt(fmt(entry, ": bad dims ", to_string(e.dims)));
    numel *= d;
  }
  if (static_cast<uint64_t>(numel) * dtype_size(e.dtype) != e.length)
    corrupt(fmt(entry, ": ", e.length, " data bytes do not hold ", dtype_name(e.dtype), to_string(e.dims)));
  if (e.offset % kDataAlignment != 0 || e.offset < table_end_ || e.offset > data_end_ || e.length > data_end_ - e.offset)
    corrupt(fmt(entry, ": data [", e.offset, ", +", e.length, ") lies outside the data area [", table_end_, ", ",
                data_end_, ") or is not 64-byte aligned"));
  check_entry_kind(e);
  return e;
}

void CheckpointReader::check_entry_kind(const Entry& e) const {
  const bool scalar = e.dims.empty();
  bool ok = false;
  switch (e.section) {
    case kParameter:
      ok = e.field == 0;
      break;
    case kOptimizerState:
      ok = (e.field == kStateStep && e.dtype == DType::kI64 && scalar) ||
           std::any_of(std::begin(kStateBuffers), std::end(kStateBuffers),
                       [&](const StateBuffer& b) { return b.field == e.field; });
      break;
    case kProperty:
      ok = (e.field == kInt && e.dtype == DType::kI64 && scalar) || (e.field == kDouble && e.dtype == DType::kF64 && scalar) ||
           (e.field == kString && e.dtype == DType::kU8 && e.dims.size() == 1);
      break;
  }
  if (!ok)
    corrupt(fmt("entry '", e.name, "': section ", int{e.section}, " field ", int{e.field}, " with ",
                dtype_name(e.dtype), to_string(e.dims), " is not a valid entry kind"));
}

// Entries' data must not overlap: two loaded tensors must never share bytes.
void CheckpointReader::check_data_regions(const std::vector<Entry>& entries) const {
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries)
    if (e.length > 0) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->length)
      corrupt(fmt("entries '", by_offset[i - 1]->name, "' and '", by_offset[i]->name, "' overlap"));
}

CheckpointState CheckpointReader::build_state(const std::vector<Entry>& entries) const {
  CheckpointState state;
  state.step = step_;
  std::set<std::tuple<uint8_t, uint8_t, std::string>> seen;
  auto view = [&](const Entry& e) {
    return Tensor::view(e.dtype, e.dims, static_cast<char*>(file_.storage.get()) + e.offset, file_.storage);
  };
  for (const Entry& e : entries) {
    const uint8_t field = e.section == kProperty ? 0 : e.field;  // one property per name, any kind
    if (!seen.insert({e.section, field, e.name}).second) corrupt(fmt("entry '", e.name, "' appears twice"));
    if (e.section == kParameter) {
      state.parameters[e.name] = view(e);
    } else if (e.section == kOptimizerState) {
      OptimizerState& s = state.optimizer_states[e.name];
      if (e.field == kStateStep) {
        std::memcpy(&s.step, file_.data() + e.offset, sizeof(s.step));
      } else {
        for (const StateBuffer& b : kStateBuffers)
          if (b.field == e.field) s.*b.member = view(e);
      }
    } else if (e.field == kInt) {
      int64_t value;
      std::memcpy(&value, file_.data() + e.offset, sizeof(value));
      state.properties[e.name] = value;
    } else if (e.field == kDouble) {
      double value;
      std::memcpy(&value, file_.data() + e.offset, sizeof(value));
      state.properties[e.name] = value;
    } else {
      state.properties[e.name] = std::string(file_.data() + e.offset, e.length);
    }
  }
  for (const auto& [name, s] : state.optimizer_states) {
    auto param = state.parameters.find(name);
    if (param == state.parameters.end()) continue;
    for (const StateBuffer& b : kStateBuffers)
      if ((s.*b.member).defined() && (s.*b.member).dims() != param->second.dims())
        corrupt(fmt("optimizer state '", b.name, "' of parameter '", name, "' is ", describe(s.*b.member),
                    " but the parameter is ", describe(param->second)));
  }
  return state;
}

}  // namespace

void CheckpointState::load(const std::filesystem::path& path) {
  CheckpointState loaded = CheckpointReader(path).read();
  std::swap(*this, loaded);
}

}  // namespace trainrt

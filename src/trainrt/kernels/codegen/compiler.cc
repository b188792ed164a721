#include "trainrt/kernels/codegen/compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "trainrt/core/error.h"
#include "trainrt/core/logging.h"

#ifndef TRAINRT_CODEGEN_CXX
#define TRAINRT_CODEGEN_CXX "c++"
#endif

extern char** environ;

namespace trainrt {
namespace {

namespace fs = std::filesystem;

// -ffp-contract=off: no a * b + c becomes one fused multiply-add, so the generated kernels round
// as the interpreted ones do (elementwise_source.h).
const std::vector<std::string> kFlags = {"-std=c++20", "-O3", "-march=native", "-mprefer-vector-width=512",
                                         "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared", "-w"};

struct Registry {
  std::mutex mutex;
  std::map<std::string, ElementwiseRowFn> functions;
  CodegenStats stats;
  bool warned = false;
};

Registry& registry() {
  static Registry& r = *new Registry;  // never destroyed: loaded code outlives static destructors
  return r;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv with stdout and stderr into `log`; the exit status, or -1 when it could not start.
int run(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A directory only this user can write: made 0700 when missing; false (and why) when it exists
// and is not this user's or others may write to it.
bool private_dir(const fs::path& dir, std::string* why) {
  std::error_code ec;
  if (fs::create_directories(dir, ec)) ::chmod(dir.c_str(), 0700);  // one of ours; an existing one is left as it is
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = fmt("cannot create the codegen cache directory ", dir.string());
    return false;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    *why = fmt("the codegen cache directory ", dir.string(), " belongs to another user or others may write to it");
    return false;
  }
  return true;
}

// Whether a cached shared object may be loaded: a regular file of this user that nobody else may write.
bool trusted_file(const fs::path& file) {
  struct stat st;
  return ::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & 022) == 0;
}

fs::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "trainrt" / "codegen";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "trainrt" / "codegen";
  return {};
}

// A fresh private temporary directory (for when no cache directory can be trusted).
fs::path temporary_dir() {
  std::string pattern = (fs::temp_directory_path() / "trainrt-codegen-XXXXXX").string();
  return ::mkdtemp(pattern.data()) ? fs::path(pattern) : fs::path();
}

// The compiler's --version line, and this CPU's model and features: what -march=native compiles for.
// Memoized per compiler.
std::string toolchain_identity(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  const std::string id = [&] {
    std::string text;
    const fs::path dir = temporary_dir();
    if (!dir.empty()) {
      const fs::path log = dir / "version.txt";
      if (run({compiler, "--version"}, log) == 0) {
        text = read_file(log);
        text.resize(std::min(text.size(), text.find('\n')));
      }
      fs::remove_all(dir);
    }
    std::ifstream cpu("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(cpu, line) && (model.empty() || flags.empty())) {
      if (model.empty() && line.rfind("model name", 0) == 0) model = line;
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
    }
    return text + "\n" + model + "\n" + flags;
  }();
  known[compiler] = id;
  return id;
}

// Loads `so` and finds every symbol; false (and dlclose) when anything is missing.
bool load(const fs::path& so, const std::vector<GeneratedFunction>& functions, Registry& r, std::string* why) {
  void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *why = fmt("dlopen of ", so.string(), " failed: ", ::dlerror());
    return false;
  }
  std::vector<std::pair<std::string, ElementwiseRowFn>> found;
  for (const GeneratedFunction& f : functions) {
    void* p = ::dlsym(handle, f.symbol.c_str());
    if (!p) {
      *why = fmt(so.string(), " has no symbol ", f.symbol);
      ::dlclose(handle);
      return false;
    }
    found.emplace_back(f.symbol, reinterpret_cast<ElementwiseRowFn>(p));
  }
  for (const auto& [symbol, fn] : found) r.functions[symbol] = fn;
  return true;  // the handle stays open for the life of the process
}

// Compiles `unit` into dir/<key>.so (through a temporary name, then a rename: a reader never
// sees half a file).
bool compile_unit(const std::string& compiler, const std::string& unit, const fs::path& dir, const std::string& key,
                  std::string* why) {
  const std::string stem = key + "." + std::to_string(::getpid());
  const fs::path source = dir / (stem + ".cc"), object = dir / (stem + ".so"), log = dir / (stem + ".log");
  {
    std::ofstream out(source);
    out << unit;
    if (!out) {
      *why = fmt("cannot write ", source.string());
      return false;
    }
  }
  std::vector<std::string> argv = {compiler};
  argv.insert(argv.end(), kFlags.begin(), kFlags.end());
  argv.insert(argv.end(), {"-o", object.string(), source.string()});
  const int status = run(argv, log);
  std::error_code ec;
  if (status != 0) {
    const std::string output = read_file(log);
    *why = status < 0 ? fmt("the compiler ", compiler, " could not be run")
                      : fmt(compiler, " failed (exit ", status, "): ", output.substr(0, 400));
    fs::remove(source, ec);
    fs::remove(log, ec);
    fs::remove(object, ec);
    return false;
  }
  ::chmod(object.c_str(), 0700);
  fs::rename(object, dir / (key + ".so"), ec);
  fs::remove(source, ec);
  fs::remove(log, ec);
  if (ec) *why = fmt("cannot move the compiled kernels into ", dir.string(), ": ", ec.message());
  return !ec;
}

}  // namespace

std::string codegen_compiler() { return TRAINRT_CODEGEN_CXX; }

std::vector<bool> compile_kernels(const std::vector<GeneratedFunction>& functions, const CodegenOptions& options) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<GeneratedFunction> missing;
  for (const GeneratedFunction& f : functions)
    if (!r.functions.count(f.symbol) &&
        std::none_of(missing.begin(), missing.end(), [&](const GeneratedFunction& m) { return m.symbol == f.symbol; }))
      missing.push_back(f);
  std::sort(missing.begin(), missing.end(), [](const auto& a, const auto& b) { return a.symbol < b.symbol; });
  if (!missing.empty()) {
    std::string unit = kernel_prelude();
    for (const GeneratedFunction& f : missing) unit += "\n" + f.source;
    std::string flags;
    for (const std::string& f : kFlags) flags += f + " ";
    const std::string compiler = options.compiler.empty() ? codegen_compiler() : options.compiler;
    const std::string key = "ew_" + stable_hash(unit + "\n" + flags + "\n" + toolchain_identity(compiler));
    if (!options.debug_dir.empty()) {
      std::error_code ec;
      fs::create_directories(options.debug_dir, ec);
      std::ofstream(fs::path(options.debug_dir) / (key + ".cc")) << unit;
    }
    std::string why;
    fs::path dir = options.cache_dir.empty() ? default_cache_dir() : fs::path(options.cache_dir);
    bool cached_dir = !dir.empty() && private_dir(dir, &why);
    if (!cached_dir) {
      if (!why.empty() && !r.warned) TRAINRT_LOG(kWarning) << why << "; compiling kernels into a temporary directory";
      dir = temporary_dir();
    }
    const auto start = std::chrono::steady_clock::now();
    const fs::path so = dir / (key + ".so");
    bool loaded = false;
    why.clear();
    if (cached_dir && trusted_file(so)) {
      loaded = load(so, missing, r, &why);
      if (loaded) r.stats.units_from_cache++;
    }
    if (!loaded && !dir.empty() && compile_unit(compiler, unit, dir, key, &why)) {
      loaded = load(so, missing, r, &why);
      r.stats.units_compiled++;
    }
    if (!cached_dir && !dir.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);  // loaded code stays mapped after its file is gone
    }
    r.stats.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!loaded && !r.warned) {
      r.warned = true;
      TRAINRT_LOG(kWarning) << "generated kernels are not used, the ops run unfused: "
                            << (why.empty() ? std::string("no directory to compile in") : why);
    }
  }
  std::vector<bool> ok;
  for (const GeneratedFunction& f : functions) ok.push_back(r.functions.count(f.symbol) > 0);
  return ok;
}

ElementwiseRowFn find_kernel(const std::string& symbol) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.functions.find(symbol);
  return it == r.functions.end() ? nullptr : it->second;
}

CodegenStats codegen_stats() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.stats;
}

}  // namespace trainrt

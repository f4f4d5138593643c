// fuzz_loading: libFuzzer target over plugin loading (dlfuse_registry_load).
//
// Each input becomes one file, libdlfuse_fuzz_<n>.so, that a fresh registry loads. The
// name is new every time and the file of a mapping that stays loaded is kept, so that
// dlopen (which matches loaded objects by name and by inode) never hands back an earlier
// mapping. The first byte
// picks how the file is made:
//   0: the raw bytes;
//   1: an ELF identification ("\x7fELF", 64-bit, little-endian) followed by the bytes,
//      so that dlopen parses further into the header;
//   2: the test plugin (tests/plugins/testref's sources, built without coverage
//      instrumentation as libdlfuse_fuzz_seed.so: the seed) cut to a fuzzed length;
//   3: the test plugin with up to 8 fuzzed byte patches inside the parts of its ELF
//      structure that a loader validates or ignores (see structure_ranges);
//   4: the test plugin, unchanged (must load and be available).
// The oracle: no crash; a non-OK status is a dlfuse_status_t with a non-empty
// dlfuse_last_error(), and the plugin is listed (plugin_info) as unavailable with a
// non-empty reason.
//
// Not fuzzed, on purpose: the bytes of code, relocations, the dynamic section or the
// init arrays. dlopen() runs a library's constructors, IFUNC resolvers and relocations
// in the host process before dlfuse sees a descriptor; garbage there executes garbage,
// which no in-process loader can contain. Loading a plugin is trusting its code
// (docs/reliability.md). The same holds for the program headers (see structure_ranges).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <elf.h>

#include <fuzzer/FuzzedDataProvider.h>

#include "dlfuse/dlfuse.h"

namespace {

std::vector<uint8_t> g_plugin;  // the test plugin's bytes
std::string g_dir;
unsigned long long g_loaded = 0, g_refused = 0;

void report() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
  std::fprintf(stderr, "fuzz_loading: %llu files loaded, %llu refused with a status and a reason\n", g_loaded,
               g_refused);
}

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_loading: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Byte ranges of the test plugin's ELF structure that a loader must validate or may
// ignore: the identification and the header fields glibc checks (e_ident, e_type,
// e_machine, e_version, e_phentsize), and everything about sections (e_shoff,
// e_shentsize, e_shnum, e_shstrndx, the section header table), which ld.so never reads.
// The program headers are NOT patched: ld.so trusts them (a patched PT_DYNAMIC made it
// read through a NULL hash table in _dl_setup_hash, found by this target).
std::vector<std::pair<size_t, size_t>> structure_ranges() {
  std::vector<std::pair<size_t, size_t>> r;
  if (g_plugin.size() < sizeof(Elf64_Ehdr)) return r;
  Elf64_Ehdr eh;
  std::memcpy(&eh, g_plugin.data(), sizeof eh);
  r.emplace_back(0, offsetof(Elf64_Ehdr, e_entry));
  r.emplace_back(offsetof(Elf64_Ehdr, e_shoff), sizeof eh.e_shoff);
  r.emplace_back(offsetof(Elf64_Ehdr, e_phentsize), sizeof eh.e_phentsize);
  r.emplace_back(offsetof(Elf64_Ehdr, e_shentsize), sizeof(Elf64_Ehdr) - offsetof(Elf64_Ehdr, e_shentsize));
  const size_t sh = size_t(eh.e_shnum) * eh.e_shentsize;
  if (eh.e_shoff + sh <= g_plugin.size()) r.emplace_back(eh.e_shoff, sh);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* e = std::getenv("FUZZ_SEED_PLUGIN");
  const char* path = e && *e ? e : FUZZ_SEED_PLUGIN;
  FILE* f = std::fopen(path, "rb");
  if (!f) fail("cannot read the test plugin", path);
  int ch;
  while ((ch = std::fgetc(f)) != EOF) g_plugin.push_back(static_cast<uint8_t>(ch));
  std::fclose(f);
  char tmpl[] = "/tmp/dlfuse-fuzz-loading-XXXXXX";
  if (!mkdtemp(tmpl)) fail("mkdtemp", tmpl);
  g_dir = tmpl;
  std::atexit(report);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  const int mode = p.ConsumeIntegralInRange<int>(0, 4);
  std::vector<uint8_t> file;
  switch (mode) {
    case 0: file = p.ConsumeRemainingBytes<uint8_t>(); break;
    case 1: {
      static const uint8_t kIdent[] = {0x7f, 'E', 'L', 'F', ELFCLASS64, ELFDATA2LSB, EV_CURRENT};
      file.assign(kIdent, kIdent + sizeof kIdent);
      const auto rest = p.ConsumeRemainingBytes<uint8_t>();
      file.insert(file.end(), rest.begin(), rest.end());
      break;
    }
    case 2:
      file.assign(g_plugin.begin(), g_plugin.begin() + p.ConsumeIntegralInRange<size_t>(0, g_plugin.size() - 1));
      break;
    case 3: {
      file = g_plugin;
      const auto ranges = structure_ranges();
      const int patches = p.ConsumeIntegralInRange<int>(1, 8);
      for (int i = 0; i < patches && !ranges.empty(); ++i) {
        const auto& r = ranges[p.ConsumeIntegralInRange<size_t>(0, ranges.size() - 1)];
        const size_t at = r.first + p.ConsumeIntegralInRange<size_t>(0, r.second - 1);
        const int width = 1 << p.ConsumeIntegralInRange<int>(0, 3);  // 1, 2, 4 or 8 bytes
        for (size_t b = 0; b < size_t(width) && at + b < r.first + r.second; ++b)
          file[at + b] = p.ConsumeIntegral<uint8_t>();
      }
      break;
    }
    default: file = g_plugin; break;
  }

  // A new name each time: write a temporary file, rename it to the plugin's name.
  static unsigned long long serial = 0;
  const std::string tmp = g_dir + "/.incoming", path = g_dir + "/libdlfuse_fuzz_" + std::to_string(++serial) + ".so";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0755);
  if (fd < 0) fail("open", tmp);
  for (size_t done = 0; done < file.size();) {
    const ssize_t w = ::write(fd, file.data() + done, file.size() - done);
    if (w <= 0) fail("write", tmp);
    done += size_t(w);
  }
  ::close(fd);
  if (const char* dump = std::getenv("FUZZ_LOADING_DUMP")) {  // keep a copy of the file, to study a crash
    if (FILE* f = std::fopen(dump, "wb")) {
      std::fwrite(file.data(), 1, file.size(), f);
      std::fclose(f);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename", path);

  dlfuse_registry_options_t o{sizeof(dlfuse_registry_options_t), DLFUSE_DISCOVER_NONE, nullptr};
  dlfuse_registry_t reg = nullptr;
  if (dlfuse_registry_create(&o, &reg) != DLFUSE_STATUS_OK) fail("registry_create", dlfuse_last_error());
  int32_t index = -1;
  const dlfuse_status_t s = dlfuse_registry_load(reg, path.c_str(), &index);
  dlfuse_plugin_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (index != 0 || dlfuse_registry_plugin_info(reg, 0, &info) != DLFUSE_STATUS_OK)
    fail("the file is not listed", "index " + std::to_string(index));
  if (s == DLFUSE_STATUS_OK) {
    ++g_loaded;
    if (!info.available) fail("loaded but unavailable", info.reason ? info.reason : "(null)");
  } else {
    ++g_refused;
    if (s < DLFUSE_STATUS_INVALID_ARGUMENT || s > DLFUSE_STATUS_INTERNAL) fail("not a status", std::to_string(s));
    const char* e = dlfuse_last_error();
    if (!e || !*e) fail("refused without a message", dlfuse_status_string(s));
    if (info.available || !info.reason || !*info.reason) fail("refused but listed without a reason", e);
  }
  if (mode == 4 && s != DLFUSE_STATUS_OK) fail("the unchanged test plugin did not load", dlfuse_last_error());
  dlfuse_registry_destroy(reg);

  // The registry keeps every plugin it dlopen()ed mapped until exit (docs/abi.md); over
  // millions of inputs that would exhaust the process's mappings. The registry is gone,
  // so drop its reference (and ours) to whatever this file mapped.
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
    dlclose(h);  // ours
    dlclose(h);  // the registry's
  }
  // A library that cannot be unloaded (NODELETE, GNU unique symbols) keeps its file, so
  // that its inode is not reused by a later input.
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))
    dlclose(h);
  else
    ::unlink(path.c_str());
  return 0;
}

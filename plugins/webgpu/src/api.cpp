#include "api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime.h"

namespace dlfuse_webgpu {
namespace {

constexpr const char* kLibName = "libwgpu_native-release.so";

// site-packages folders of the python3 on PATH (the wheel's usual home), asked once. The
// child's stderr is discarded: a missing python3 just adds no candidate.
std::vector<std::string> python_candidates() {
  std::vector<std::string> out;
  FILE* p = popen(
      "python3 -c \"import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))\" "
      "2>/dev/null",
      "r");
  if (!p) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (!s.empty()) out.push_back(s + "/wgpu/resources/" + kLibName);
  }
  pclose(p);
  return out;
}

Api load() {
  std::vector<std::string> tried;
  std::vector<std::string> candidates;
  const char* env = std::getenv("DLFUSE_WGPU_LIBRARY");
  if (env && *env) {
    candidates.push_back(env);  // the user's choice alone: no silent fallback past it
  } else {
    candidates.push_back(DLFUSE_WGPU_DEFAULT_LIBRARY);
    for (const std::string& c : python_candidates()) candidates.push_back(c);
    candidates.push_back("libwgpu_native.so");
  }
  void* h = nullptr;
  std::string used;
  for (const std::string& c : candidates) {
    h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      used = c;
      break;
    }
    const char* e = dlerror();
    tried.push_back(e ? e : c + ": not loadable");
  }
  if (!h) {
    std::string why = "wgpu-native not found (install PyPI's wgpu, or set DLFUSE_WGPU_LIBRARY); tried: ";
    for (size_t i = 0; i < tried.size(); ++i) why += (i ? "; " : "") + tried[i];
    throw Error(DLFUSE_STATUS_UNAVAILABLE, why);
  }
  Api a;
  a.path = used;
#define DLFUSE_WGPU_LOAD(name)                                                              \
  a.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                            \
  if (!a.name)                                                                              \
    throw Error(DLFUSE_STATUS_UNAVAILABLE, used + " lacks " #name                           \
                                                  " (expected the wgpu-native of the wgpu " \
                                                  "wheel, webgpu.h of 2025 or later)");
  DLFUSE_WGPU_FUNCTIONS(DLFUSE_WGPU_LOAD)
#undef DLFUSE_WGPU_LOAD
  return a;
}

}  // namespace

const Api& api() {
  // Loaded once; a failure is kept and reported again to every later open().
  static std::once_flag once;
  static Api loaded;
  static std::string failure;
  std::call_once(once, [] {
    try {
      loaded = load();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(DLFUSE_STATUS_UNAVAILABLE, failure);
  return loaded;
}

}  // namespace dlfuse_webgpu

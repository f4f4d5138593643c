#include "discovery.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace dlfuse {
namespace {

bool is_plugin_file_name(const std::string& n) {
  const std::string prefix = "libdlfuse_", suffix = ".so";
  return n.size() > prefix.size() + suffix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
         n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A folder: its libdlfuse_*.so files in name order. A file: itself.
void load_entry(dlfuse_registry* r, const std::string& entry) {
  struct stat st;
  if (stat(entry.c_str(), &st) != 0) return;  // a missing folder in a path list is normal
  if (!S_ISDIR(st.st_mode)) {
    load_plugin_locked(r, entry, nullptr);
    return;
  }
  std::vector<std::string> names;
  if (DIR* d = opendir(entry.c_str())) {
    while (const dirent* e = readdir(d))
      if (is_plugin_file_name(e->d_name)) names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) load_plugin_locked(r, entry + "/" + n, nullptr);
}

void load_path_list(dlfuse_registry* r, const char* list) {
  if (!list) return;
  std::string s(list);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    const std::string entry = s.substr(start, end - start);
    // An empty or relative entry would mean "somewhere under the current directory",
    // which is never searched: a plugin is code that runs in the host process.
    if (!entry.empty() && entry[0] == '/')
      load_entry(r, entry);
    else if (!entry.empty())
      record_refusal_locked(r, entry, DLFUSE_STATUS_INVALID_ARGUMENT,
                            "relative path in a plugin path list; expected an absolute path "
                            "(the current directory is never searched)");
    start = end + 1;
  }
}

}  // namespace

std::string install_plugin_dir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&install_plugin_dir), &info) || !info.dli_fname) return "";
  char resolved[4096];
  std::string lib = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  const size_t slash = lib.find_last_of('/');
  if (slash == std::string::npos) return "";
  return lib.substr(0, slash) + "/dlfuse/plugins";
}

void discover_locked(dlfuse_registry* r, uint32_t flags, const char* plugin_paths) {
  load_path_list(r, plugin_paths);
  if (flags & DLFUSE_DISCOVER_ENV) load_path_list(r, std::getenv("DLFUSE_PLUGIN_PATH"));
  if (flags & DLFUSE_DISCOVER_INSTALL_DIR) {
    const std::string dir = install_plugin_dir();
    if (!dir.empty()) load_entry(r, dir);
  }
}

}  // namespace dlfuse

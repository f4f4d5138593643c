// The registry's lifetime, loading, listing and preferences (the C API's first half).
#include "registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "discovery.hpp"
#include "error.hpp"
#include "op_validators.hpp"

using namespace dlfuse;

namespace {

// Applies DLFUSE_PREFER="a,b,c": a wins over b over c, so apply them in reverse.
void apply_env_preferences(dlfuse_registry* r) {
  const char* env = std::getenv("DLFUSE_PREFER");
  if (!env || !*env) return;
  std::vector<std::string> names;
  std::string s(env);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) names.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  for (auto it = names.rbegin(); it != names.rend(); ++it) r->preferences.insert(r->preferences.begin(), {"", *it});
}

dlfuse_status_t check_registry(dlfuse_registry_t r, const char* fn) {
  if (!r) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'registry' is NULL; expected a registry", fn);
  return DLFUSE_STATUS_OK;
}

// A caller-filled info struct: present, and at least its ABI 1.0 fields (`need` bytes).
template <class Info>
dlfuse_status_t check_info(const Info* info, size_t need, const char* fn, const char* type) {
  if (!info)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'info' is NULL; expected a %s with struct_size >= %zu",
                fn, type, need);
  if (info->struct_size < need)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'info': struct_size is %zu; expected >= %zu", fn,
                static_cast<size_t>(info->struct_size), need);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_plugin_index(dlfuse_registry_t r, int32_t plugin, const char* fn) {
  const int32_t n = static_cast<int32_t>(r->plugins.size());
  if (plugin < 0 || plugin >= n)
    return fail(DLFUSE_STATUS_NOT_FOUND, "%s: argument 'plugin' is %d; expected 0..%d", fn, plugin, n - 1);
  return DLFUSE_STATUS_OK;
}

}  // namespace

extern "C" {

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_create(const dlfuse_registry_options_t* options,
                                                     dlfuse_registry_t* registry) {
  return guarded("dlfuse_registry_create", [&] {
    if (!registry)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_registry_create: argument 'registry' is NULL; expected a pointer to receive the registry");
    *registry = nullptr;
    uint32_t flags = DLFUSE_DISCOVER_DEFAULT;
    const char* paths = nullptr;
    if (options) {
      constexpr size_t need = offsetof(dlfuse_registry_options_t, plugin_paths) + sizeof(const char*);
      if (options->struct_size < need)
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                    "dlfuse_registry_create: argument 'options': struct_size is %zu; expected >= %zu",
                    options->struct_size, need);
      if (options->discovery & ~static_cast<uint32_t>(DLFUSE_DISCOVER_DEFAULT))
        return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                    "dlfuse_registry_create: argument 'options': discovery is 0x%x; expected bits of 0x%x",
                    options->discovery, DLFUSE_DISCOVER_DEFAULT);
      flags = options->discovery;
      paths = options->plugin_paths;
    }
    auto r = std::make_unique<dlfuse_registry>();
    {
      std::lock_guard<std::mutex> lock(r->mutex);
      for (int32_t i = 0; i < DLFUSE_NUM_CORE_OPS; ++i)
        r->builtin[i] = op_handle_locked(r.get(), op_schema(core_op(i)).name);
      discover_locked(r.get(), flags, paths);
      apply_env_preferences(r.get());
      publish_snapshot_locked(r.get());
    }
    *registry = r.release();
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT void dlfuse_registry_destroy(dlfuse_registry_t registry) {
  if (!registry) return;
  for (auto& p : registry->plugins) {
    if (p->state) {
      try {
        p->api.close(p->state);
      } catch (...) {
        // A plugin broke the no-throw rule while closing; nothing left to report it to.
      }
    }
  }
  // Libraries stay mapped: a thread-local destructor or an atexit handler of a plugin
  // may still point into them, and unmapping buys nothing at this point.
  delete registry;
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_load(dlfuse_registry_t registry, const char* path, int32_t* index) {
  return guarded("dlfuse_registry_load", [&] {
    if (auto s = check_registry(registry, "dlfuse_registry_load")) return s;
    if (!path || !*path)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_registry_load: argument 'path' is %s; expected a file path",
                  path ? "empty" : "NULL");
    std::lock_guard<std::mutex> lock(registry->mutex);
    const dlfuse_status_t s = load_plugin_locked(registry, path, index);
    publish_snapshot_locked(registry);
    return s;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_plugin_count(dlfuse_registry_t registry, int32_t* count) {
  return guarded("dlfuse_registry_plugin_count", [&] {
    if (auto s = check_registry(registry, "dlfuse_registry_plugin_count")) return s;
    if (!count) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_registry_plugin_count: argument 'count' is NULL");
    std::lock_guard<std::mutex> lock(registry->mutex);
    *count = static_cast<int32_t>(registry->plugins.size());
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_plugin_info(dlfuse_registry_t registry, int32_t plugin,
                                                          dlfuse_plugin_info_t* info) {
  return guarded("dlfuse_registry_plugin_info", [&] {
    if (auto s = check_registry(registry, "dlfuse_registry_plugin_info")) return s;
    if (auto s = check_info(info, offsetof(dlfuse_plugin_info_t, num_kernels) + sizeof(int32_t),
                            "dlfuse_registry_plugin_info", "dlfuse_plugin_info_t"))
      return s;
    std::lock_guard<std::mutex> lock(registry->mutex);
    if (auto s = check_plugin_index(registry, plugin, "dlfuse_registry_plugin_info")) return s;
    const Plugin& p = *registry->plugins[plugin];
    const size_t size = info->struct_size;
    dlfuse_plugin_info_t full{};
    full.struct_size = size;
    full.name = p.name.c_str();
    full.version = p.version.c_str();
    full.path = p.path.c_str();
    full.available = p.available ? 1 : 0;
    full.reason = p.reason.c_str();
    full.device_type = p.api.device_type;
    full.device_count = p.device_count;
    full.abi_major = p.api.abi_major;
    full.abi_minor = p.api.abi_minor;
    full.num_kernels = static_cast<int32_t>(p.kernels.size());
    std::memcpy(info, &full, size < sizeof full ? size : sizeof full);  // an older caller gets its prefix
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_kernel_info(dlfuse_registry_t registry, int32_t plugin, int32_t kernel,
                                                          dlfuse_kernel_info_t* info) {
  return guarded("dlfuse_registry_kernel_info", [&] {
    if (auto s = check_registry(registry, "dlfuse_registry_kernel_info")) return s;
    if (auto s = check_info(info, offsetof(dlfuse_kernel_info_t, priority) + sizeof(int32_t),
                            "dlfuse_registry_kernel_info", "dlfuse_kernel_info_t"))
      return s;
    std::lock_guard<std::mutex> lock(registry->mutex);
    if (auto s = check_plugin_index(registry, plugin, "dlfuse_registry_kernel_info")) return s;
    const Plugin& p = *registry->plugins[plugin];
    const int32_t n = static_cast<int32_t>(p.kernels.size());
    if (kernel < 0 || kernel >= n)
      return fail(DLFUSE_STATUS_NOT_FOUND,
                  "dlfuse_registry_kernel_info: argument 'kernel' is %d; expected 0..%d (plugin '%s')", kernel, n - 1,
                  p.name.c_str());
    const Kernel& k = p.kernels[kernel];
    const size_t size = info->struct_size;
    dlfuse_kernel_info_t full{};
    full.struct_size = size;
    full.op = k.op.c_str();
    full.device_type = k.device_type;
    full.num_dtypes = static_cast<int32_t>(k.dtypes.size());
    full.dtypes = k.dtypes.data();
    full.priority = k.priority;
    full.flags = k.flags;
    full.dtype_priorities = k.dtype_priorities.data();
    std::memcpy(info, &full, size < sizeof full ? size : sizeof full);
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_prefer(dlfuse_registry_t registry, const char* op,
                                                     const char* plugin_name) {
  return guarded("dlfuse_registry_prefer", [&] {
    if (auto s = check_registry(registry, "dlfuse_registry_prefer")) return s;
    std::lock_guard<std::mutex> lock(registry->mutex);
    const std::string op_key = op ? op : "";
    auto& prefs = registry->preferences;
    if (!plugin_name) {
      prefs.erase(std::remove_if(prefs.begin(), prefs.end(),
                                 [&](const auto& p) { return op_key.empty() || p.first == op_key; }),
                  prefs.end());
    } else {
      bool known = false;
      for (const auto& p : registry->plugins) known = known || (p->available && p->name == plugin_name);
      if (!known) {
        std::string names;
        for (const auto& p : registry->plugins)
          if (p->available) names += (names.empty() ? "" : ", ") + p->name;
        return fail(DLFUSE_STATUS_NOT_FOUND,
                    "dlfuse_registry_prefer: argument 'plugin_name' is '%s'; expected an available plugin: %s",
                    plugin_name, names.empty() ? "(none)" : names.c_str());
      }
      prefs.insert(prefs.begin(), {op_key, plugin_name});
    }
    publish_snapshot_locked(registry);
    return DLFUSE_STATUS_OK;
  });
}

}  // extern "C"

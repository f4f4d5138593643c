// dlopen a plugin file, check its descriptor against ABI 1, open it, copy its kernels.
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "error.hpp"
#include "declared_ops.hpp"
#include "format.hpp"
#include "op_validators.hpp"
#include "registry.hpp"

namespace dlfuse {
namespace {

// The last field of each ABI 1.0 struct: a plugin's struct_size must reach past it.
constexpr size_t kPluginV1_0Size = offsetof(dlfuse_plugin_t, synchronize) + sizeof(void*);
constexpr size_t kKernelV1_0Size = offsetof(dlfuse_kernel_t, kernel_data) + sizeof(void*);

std::string file_stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.rfind("libdlfuse_", 0) == 0) base = base.substr(10);
  const size_t dot = base.find(".so");
  return dot == std::string::npos ? base : base.substr(0, dot);
}

// dlopen() maps a file's segments without checking that the file holds them: a plugin
// file cut short (an interrupted copy or install) raises SIGBUS inside ld.so when it
// touches a page past the end. A 64-bit ELF whose program headers or segments reach past
// the end of the file is refused here instead; anything else is left to dlopen's checks.
std::string truncated_elf(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string why;
  struct stat st;
  Elf64_Ehdr eh;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, &eh, sizeof eh, 0) == ssize_t(sizeof eh) &&
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_phentsize == sizeof(Elf64_Phdr)) {
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t table_end = eh.e_phoff + uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr);
    if (eh.e_phoff > size || table_end > size) {
      why = "file is truncated: its program headers end at byte " + std::to_string(table_end) + ", the file has " +
            std::to_string(size);
    } else {
      for (uint16_t i = 0; i < eh.e_phnum && why.empty(); ++i) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, off_t(eh.e_phoff + i * sizeof ph)) != ssize_t(sizeof ph)) break;
        if (ph.p_filesz > 0 && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
          why = "file is truncated: segment " + std::to_string(i) + " needs bytes up to " +
                std::to_string(ph.p_offset + ph.p_filesz) + ", the file has " + std::to_string(size) +
                " (refused before dlopen, which would fault on the missing pages)";
      }
    }
  }
  close(fd);
  return why;
}

// Records the failure on the plugin entry and as the thread's last error.
dlfuse_status_t refuse(Plugin* p, dlfuse_status_t status, const std::string& why) {
  p->reason = why;
  p->status = status;
  p->available = false;
  return fail(status, "dlfuse_registry_load: %s: %s", p->path.c_str(), why.c_str());
}

bool valid_name(const char* name) {
  if (!name || !*name || std::strlen(name) > 64) return false;
  for (const char* c = name; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return false;
  return true;
}

dlfuse_status_t read_descriptor(Plugin* p, const dlfuse_plugin_t* d) {
  if (!d)
    return refuse(p, DLFUSE_STATUS_LOAD_FAILED,
                  std::string(DLFUSE_PLUGIN_ENTRY) + "() returned NULL; expected a descriptor");
  if (d->struct_size < offsetof(dlfuse_plugin_t, abi_minor) + sizeof(uint32_t))
    return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "descriptor struct_size is " + std::to_string(d->struct_size) + "; expected at least " +
                      std::to_string(kPluginV1_0Size) + " (ABI 1.0)");
  if (d->abi_major != DLFUSE_ABI_MAJOR)
    return refuse(p, DLFUSE_STATUS_ABI_MISMATCH,
                  "plugin was built for dlfuse ABI " + std::to_string(d->abi_major) + "." +
                      std::to_string(d->abi_minor) + "; this libdlfuse speaks ABI " + std::to_string(DLFUSE_ABI_MAJOR) +
                      "." + std::to_string(DLFUSE_ABI_MINOR) + " (majors must match)");
  if (d->struct_size < kPluginV1_0Size)
    return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "descriptor struct_size is " + std::to_string(d->struct_size) + "; expected at least " +
                      std::to_string(kPluginV1_0Size) + " (every field of ABI 1.0)");
  // A newer minor may be longer than ours: read only what we know.
  std::memcpy(&p->api, d, d->struct_size < sizeof(p->api) ? d->struct_size : sizeof(p->api));
  const dlfuse_plugin_t& a = p->api;
  if (!valid_name(a.name))
    return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "descriptor name is invalid; expected 1-64 characters of [a-z0-9_]");
  p->name = a.name;
  p->version = a.version ? a.version : "";
  const struct {
    const void* fn;
    const char* field;
  } required[] = {{reinterpret_cast<const void*>(a.open), "open"},
                  {reinterpret_cast<const void*>(a.close), "close"},
                  {reinterpret_cast<const void*>(a.get_kernels), "get_kernels"},
                  {reinterpret_cast<const void*>(a.device_count), "device_count"},
                  {reinterpret_cast<const void*>(a.alloc), "alloc"},
                  {reinterpret_cast<const void*>(a.free), "free"},
                  {reinterpret_cast<const void*>(a.copy), "copy"},
                  {reinterpret_cast<const void*>(a.synchronize), "synchronize"}};
  for (const auto& r : required)
    if (!r.fn)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                    std::string("descriptor field '") + r.field + "' is NULL; expected a function");
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t copy_kernels(Plugin* p, const dlfuse_kernel_t* table, int32_t n) {
  if (n < 0 || (n > 0 && !table))
    return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "get_kernels gave " + std::to_string(n) + " kernels at " + (table ? "a table" : "NULL") +
                      "; expected a count >= 0 and a table when > 0");
  // The table's stride is the plugin's sizeof(dlfuse_kernel_t), which a newer minor
  // may have grown: step by the first entry's struct_size, never by ours.
  const size_t stride = n > 0 ? table[0].struct_size : 0;
  for (int32_t i = 0; i < n; ++i) {
    const auto& k = *reinterpret_cast<const dlfuse_kernel_t*>(reinterpret_cast<const char*>(table) + i * stride);
    const std::string where = "kernel " + std::to_string(i) + ": ";
    if (k.struct_size < kKernelV1_0Size || k.struct_size != stride)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                    where + "struct_size is " + std::to_string(k.struct_size) + "; expected " +
                        (k.struct_size < kKernelV1_0Size ? "at least " + std::to_string(kKernelV1_0Size)
                                                         : "entry 0's, " + std::to_string(stride)) +
                        " (one size for every entry)");
    if (!k.op || !*k.op)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT, where + "op is NULL or empty; expected an op name");
    if (!k.fn) return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT, where + "fn is NULL; expected a function");
    if (k.device_type != p->api.device_type)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                    where + "device_type is " + device_type_name(k.device_type) + "; expected " +
                        device_type_name(p->api.device_type) + ", the plugin's");
    if (k.num_dtypes <= 0 || !k.dtypes)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                    where + "declares " + std::to_string(k.num_dtypes) + " dtypes; expected at least one");
    for (const Kernel& other : p->kernels)
      if (other.op == k.op)
        return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                      where + "op '" + k.op + "' appears twice; expected one entry per op");
    Kernel c;
    c.op = k.op;
    c.device_type = k.device_type;
    c.dtypes.assign(k.dtypes, k.dtypes + k.num_dtypes);
    c.priority = k.priority;
    c.fn = k.fn;
    c.kernel_data = k.kernel_data;
    c.flags = DLFUSE_HAS_FIELD(&k, dlfuse_kernel_t, flags) ? k.flags : 0;
    const int32_t* prios = DLFUSE_HAS_FIELD(&k, dlfuse_kernel_t, dtype_priorities) ? k.dtype_priorities : nullptr;
    if (prios)
      c.dtype_priorities.assign(prios, prios + k.num_dtypes);
    else
      c.dtype_priorities.assign(size_t(k.num_dtypes), k.priority);
    const dlfuse_op_schema_t* schema = DLFUSE_HAS_FIELD(&k, dlfuse_kernel_t, schema) ? k.schema : nullptr;
    if (schema) {
      if (find_core_op(k.op))
        return refuse(
            p, DLFUSE_STATUS_INVALID_ARGUMENT,
            where + "declares a schema for '" + k.op + "', a core op; expected NULL (dlfuse/ops.def describes it)");
      const std::string why = check_declared_schema(*schema);
      if (!why.empty()) return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT, where + why);
      if (std::strcmp(schema->name, k.op) != 0)
        return refuse(
            p, DLFUSE_STATUS_INVALID_ARGUMENT,
            where + "op is '" + k.op + "' but its schema names '" + schema->name + "'; expected the same name");
      p->declares.push_back(copy_declared(*schema));
    }
    p->kernels.push_back(std::move(c));
  }
  return DLFUSE_STATUS_OK;
}

// Runs the plugin's open/get_kernels/device_count; any failure makes it unavailable.
dlfuse_status_t open_plugin(Plugin* p) {
  char err[1024] = "";
  dlfuse_host_info_t host{};
  host.struct_size = sizeof host;
  host.abi_major = DLFUSE_ABI_MAJOR;
  host.abi_minor = DLFUSE_ABI_MINOR;
  host.plugin_path = p->path.c_str();
  const auto plugin_said = [&](const char* fn, int s) {
    return std::string(fn) + " failed with " + status_name(static_cast<dlfuse_status_t>(s)) + ": " +
           (err[0] ? err : "(no message)");
  };
  try {
    void* state = nullptr;
    int s = p->api.open(&host, &state, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (s != DLFUSE_STATUS_OK) return refuse(p, DLFUSE_STATUS_UNAVAILABLE, plugin_said("open", s));
    p->state = state;
    p->available = true;  // from here on close() must run, even if the rest fails
    const dlfuse_kernel_t* table = nullptr;
    int32_t n = 0;
    s = p->api.get_kernels(state, &table, &n, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (s != DLFUSE_STATUS_OK) return refuse(p, DLFUSE_STATUS_UNAVAILABLE, plugin_said("get_kernels", s));
    if (auto st = copy_kernels(p, table, n)) return st;
    int32_t count = 0;
    s = p->api.device_count(state, &count, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (s != DLFUSE_STATUS_OK) return refuse(p, DLFUSE_STATUS_UNAVAILABLE, plugin_said("device_count", s));
    if (count <= 0)
      return refuse(p, DLFUSE_STATUS_UNAVAILABLE, "device_count is " + std::to_string(count) + ": no device");
    p->device_count = count;
  } catch (const std::exception& e) {
    return refuse(p, DLFUSE_STATUS_INTERNAL, std::string("plugin threw a C++ exception while opening: ") + e.what());
  } catch (...) {
    return refuse(p, DLFUSE_STATUS_INTERNAL, "plugin threw while opening");
  }
  return DLFUSE_STATUS_OK;
}

// A loaded plugin's declared ops join the registry's; an op declared before (by another
// plugin) must be declared alike.
dlfuse_status_t publish_declared(dlfuse_registry* r, Plugin* p) {
  for (const auto& d : p->declares)
    for (const auto& existing : r->declared)
      if (std::strcmp(existing->schema.name, d->schema.name) == 0 && !same_schema(existing->schema, d->schema))
        return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                      std::string("op '") + d->schema.name + "' is declared with another schema by plugin '" +
                          r->plugins[size_t(existing->schema.plugin)]->name + "'; expected the same schema");
  for (auto& d : p->declares) {
    bool known = false;
    for (const auto& existing : r->declared) known = known || std::strcmp(existing->schema.name, d->schema.name) == 0;
    if (known) continue;
    d->schema.plugin = p->index;
    r->declared.push_back(std::move(d));
  }
  p->declares.clear();
  return DLFUSE_STATUS_OK;
}

}  // namespace

void record_refusal_locked(dlfuse_registry* r, const std::string& path, dlfuse_status_t status,
                           const std::string& why) {
  auto p = std::make_unique<Plugin>();
  p->index = static_cast<int32_t>(r->plugins.size());
  p->path = path;
  p->name = file_stem(path);
  p->reason = why;
  p->status = status;
  r->plugins.push_back(std::move(p));
}

dlfuse_status_t load_plugin_locked(dlfuse_registry* r, const std::string& path, int32_t* index) {
  char resolved[4096];
  const std::string real = realpath(path.c_str(), resolved) ? std::string(resolved) : path;
  for (const auto& existing : r->plugins)
    if (existing->path == real) {  // the same file twice (say, env and install dir): once is enough
      if (index) *index = existing->index;
      if (existing->available) return DLFUSE_STATUS_OK;
      return fail(existing->status, "dlfuse_registry_load: %s: %s", real.c_str(), existing->reason.c_str());
    }

  auto owned = std::make_unique<Plugin>();
  Plugin* p = owned.get();
  p->index = static_cast<int32_t>(r->plugins.size());
  p->path = real;
  p->name = file_stem(real);
  r->plugins.push_back(std::move(owned));
  if (index) *index = p->index;

  // A path that names no file is the caller's mistake, not a broken plugin: NOT_FOUND,
  // which a caller can tell from LOAD_FAILED (a file that is there but does not load).
  struct stat st;
  if (stat(real.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
    return refuse(p, DLFUSE_STATUS_NOT_FOUND,
                  "argument 'path' names no file (" + std::string(std::strerror(errno)) + "); expected a plugin file");
  const std::string truncated = truncated_elf(real);
  if (!truncated.empty()) return refuse(p, DLFUSE_STATUS_LOAD_FAILED, truncated);
  // RTLD_LOCAL: plugins never see each other's symbols, nor leak theirs into the host.
  p->handle = dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p->handle) {
    const char* e = dlerror();
    return refuse(p, DLFUSE_STATUS_LOAD_FAILED, std::string("dlopen failed: ") + (e ? e : "unknown error"));
  }
  auto entry = reinterpret_cast<dlfuse_plugin_entry_fn_t>(dlsym(p->handle, DLFUSE_PLUGIN_ENTRY));
  if (!entry) {
    for (int major = DLFUSE_ABI_MAJOR + 1; major <= DLFUSE_ABI_MAJOR + 8; ++major) {
      const std::string newer = "dlfuse_plugin_v" + std::to_string(major);
      if (dlsym(p->handle, newer.c_str()))
        return refuse(p, DLFUSE_STATUS_ABI_MISMATCH,
                      "plugin exports " + newer + " (ABI " + std::to_string(major) + "); this libdlfuse speaks ABI " +
                          std::to_string(DLFUSE_ABI_MAJOR) + " and looks for " + DLFUSE_PLUGIN_ENTRY);
    }
    return refuse(p, DLFUSE_STATUS_LOAD_FAILED,
                  std::string("no entry symbol ") + DLFUSE_PLUGIN_ENTRY + "; not a dlfuse plugin");
  }
  const dlfuse_plugin_t* desc = nullptr;
  try {
    desc = entry();
  } catch (...) {
    return refuse(p, DLFUSE_STATUS_INTERNAL, std::string(DLFUSE_PLUGIN_ENTRY) + "() threw a C++ exception");
  }
  if (auto s = read_descriptor(p, desc)) return s;
  for (const auto& other : r->plugins)
    if (other.get() != p && other->available && other->name == p->name)
      return refuse(p, DLFUSE_STATUS_INVALID_ARGUMENT,
                    "plugin name '" + p->name + "' is already loaded from " + other->path + "; expected unique names");
  dlfuse_status_t s = open_plugin(p);
  if (!s) s = publish_declared(r, p);
  if (s) {
    if (p->state) {  // opened but broken later: give its resources back now
      try {
        p->api.close(p->state);
      } catch (...) {
      }
      p->state = nullptr;
    }
    p->kernels.clear();
    p->declares.clear();
    p->device_count = 0;
    return s;
  }
  return DLFUSE_STATUS_OK;
}

}  // namespace dlfuse

// The registry's state. Loading and preferences are serialized by `mutex`; calls read
// an immutable dispatch snapshot through one atomic pointer and never lock.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dlfuse/dlfuse.h"
#include "dlfuse/plugin.h"
#include "op_spec.hpp"

namespace dlfuse {

// A kernel table entry, copied out of the plugin (it may be shorter than ours).
struct Kernel {
  std::string op;
  int32_t device_type = 0;
  std::vector<DLDataType> dtypes;
  int32_t priority = 0;
  dlfuse_kernel_fn_t fn = nullptr;
  void* kernel_data = nullptr;
  uint32_t flags = 0;                     // DLFUSE_KERNEL_* (0 from a 1.0 table)
  std::vector<int32_t> dtype_priorities;  // one per dtype (all `priority` before ABI 1.2)
  // Whether it serves (dev, dt), and at which priority.
  bool accepts(int32_t dev, DLDataType dt, int32_t* prio) const {
    if (dev != device_type) return false;
    for (size_t i = 0; i < dtypes.size(); ++i)
      if (dtypes[i].code == dt.code && dtypes[i].bits == dt.bits) {
        *prio = dtype_priorities[i];
        return true;
      }
    return false;
  }
};

// An op a plugin declared (ABI 1.2): a copy of its schema, owned by the registry, and its
// validation spec. Never removed while the registry lives.
struct DeclaredOp {
  std::vector<std::string> names;  // every string the schema points to
  std::vector<dlfuse_arg_schema_t> inputs, outputs;
  std::vector<dlfuse_attr_schema_t> attrs;
  dlfuse_op_schema_t schema{};
  std::unique_ptr<OpSpec> spec;
};

// A plugin file, loaded or not. Never moves once created (held by unique_ptr).
struct Plugin {
  int32_t index = 0;
  std::string path, name, version, reason;
  void* handle = nullptr;  // dlopen handle; kept for the registry's lifetime
  dlfuse_plugin_t api{};   // the descriptor, zero past the plugin's struct_size
  void* state = nullptr;
  bool available = false;
  dlfuse_status_t status = DLFUSE_STATUS_OK;  // why it is unavailable
  int32_t device_count = 0;
  std::vector<Kernel> kernels;
  std::vector<std::unique_ptr<DeclaredOp>> declares;  // its declared ops, until published
};

// Dispatch order for one op: candidates in preference order.
struct Candidate {
  Plugin* plugin;
  const Kernel* kernel;
  int pref;  // the user's preference rank (lower first; INT_MAX: none)
};
struct OpTable {
  std::vector<Candidate> candidates;
  const OpSpec* spec = nullptr;  // the op's schema; NULL: generic checks only
};

// Immutable once published; old ones live until the registry dies, so a call that
// read a pointer can always finish with it.
struct Snapshot {
  std::vector<OpTable> by_op_id;       // indexed by dlfuse_op::id
  std::vector<Plugin*> service_order;  // available plugins, preferred first, for device services
};

}  // namespace dlfuse

struct dlfuse_op {
  dlfuse_registry* registry;
  int32_t id;
  std::string name;
  std::atomic<dlfuse_op*> backward{nullptr};  // "<name>_backward"'s handle, once asked for
};

struct dlfuse_registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<dlfuse::Plugin>> plugins;
  std::unordered_map<std::string, std::unique_ptr<dlfuse_op>> ops;  // by name
  std::vector<dlfuse_op*> ops_by_id;
  // (op or "" for every op, plugin name); the latest first.
  std::vector<std::pair<std::string, std::string>> preferences;
  std::vector<std::unique_ptr<const dlfuse::Snapshot>> snapshots;
  std::atomic<const dlfuse::Snapshot*> current{nullptr};
  dlfuse_op* builtin[DLFUSE_NUM_CORE_OPS] = {};               // the typed functions' handles, by core-op index
  std::vector<std::unique_ptr<dlfuse::DeclaredOp>> declared;  // in declaration order
};

namespace dlfuse {

// Under registry->mutex: the spec of a core or declared op, or NULL.
const OpSpec* find_spec_locked(const dlfuse_registry* r, const std::string& name);
// Under registry->mutex: the op's handle, created on first use.
dlfuse_op* op_handle_locked(dlfuse_registry* r, const std::string& name);
// Under registry->mutex: whether an available plugin has a kernel for op `name`.
bool offered_locked(const dlfuse_registry* r, const std::string& name);
// The op's schema and rules in the current snapshot; NULL where it has no schema.
const OpSpec* spec_of(const dlfuse_op* op);
// Under registry->mutex: rebuilds and publishes the dispatch snapshot.
void publish_snapshot_locked(dlfuse_registry* r);
// Loads one file (under the mutex); always leaves an entry describing the outcome.
dlfuse_status_t load_plugin_locked(dlfuse_registry* r, const std::string& path, int32_t* index);
// Under the mutex: lists `path` as unavailable without opening it.
void record_refusal_locked(dlfuse_registry* r, const std::string& path, dlfuse_status_t status, const std::string& why);
// The plugin serving device services for a device type, or NULL (last error set).
Plugin* device_plugin(dlfuse_registry* r, int32_t device_type, const char* caller);
dlfuse_status_t resolve_op(dlfuse_op* op, int32_t device_type, DLDataType dtype, int32_t* plugin);
// Whether the kernel serving op for (device type, dtype) takes the inputs appended after the
// op's minor (DLFUSE_KERNEL_TAKES_V1_1_INPUTS); false where none serves it.
bool serving_kernel_takes_newer_inputs(dlfuse_op* op, int32_t device_type, DLDataType dtype);
// Runs a validated call (shared by dlfuse_op_call and the typed functions).
dlfuse_status_t call_op(dlfuse_op* op, const DLTensor* const* inputs, int32_t num_inputs, DLTensor* const* outputs,
                        int32_t num_outputs, const dlfuse_attr_t* attrs, int32_t num_attrs, void* stream);

}  // namespace dlfuse

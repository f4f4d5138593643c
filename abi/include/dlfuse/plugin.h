/* dlfuse/plugin.h: what a plugin exports. Include only this header to write one.
 *
 * A plugin is a shared library `libdlfuse_<name>.so` that exports exactly one C symbol,
 *
 *     DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void);
 *
 * returning a descriptor that lives as long as the library. Everything else reaches
 * the host through that descriptor. Rules (docs/plugin-guide.md has the long form):
 *  - No C++ exception, longjmp or abort crosses this boundary: catch everything.
 *  - On failure a function returns a status and writes a NUL-terminated message of at
 *    most `err_size` bytes (truncated if longer) into `err`.
 *  - The registry validates every kernel call for the core ops (dlfuse/ops.def) and for
 *    the ops plugins declare (ABI 1.2, dlfuse_kernel_t.schema) before the plugin sees it
 *    (docs/abi.md lists what is checked); a plugin checks what only it can know
 *    (alignment it needs, device limits, its own resources).
 *  - Kernels enqueue on `stream` (NULL: the plugin's default stream) and return; they
 *    do not synchronize the device unless the device has no asynchronous queue.
 *  - Kernels and device services may be called from many threads at once.
 */
#ifndef DLFUSE_PLUGIN_H_
#define DLFUSE_PLUGIN_H_

#include "dlfuse/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The entry symbol's name for this ABI major. */
#define DLFUSE_PLUGIN_ENTRY "dlfuse_plugin_v1"

/* What the host tells a plugin when it opens it. */
typedef struct dlfuse_host_info_t {
  size_t struct_size;
  uint32_t abi_major;      /* the host's DLFUSE_ABI_MAJOR */
  uint32_t abi_minor;      /* the host's DLFUSE_ABI_MINOR */
  const char* plugin_path; /* the file the plugin was loaded from */
} dlfuse_host_info_t;

/* One call of a kernel. Tensors are non-owning DLTensor views: `strides` may be NULL
 * (compact row-major) and `byte_offset` must be honored (on OpenCL `data` is a cl_mem).
 * For an op with a schema (the core ops, declared ops) the registry passes every attribute
 * the op takes, defaults filled in, in the schema's order. */
typedef struct dlfuse_kernel_args_t {
  size_t struct_size;
  const char* op;                /* the op's name, e.g. DLFUSE_OP_MATMUL_ADD_RELU */
  const DLTensor* const* inputs; /* num_inputs views, in the op's documented order; an
                                    entry is NULL where the op says an input may be absent
                                    (only in calls to plugins of ABI >= 1.1) */
  int32_t num_inputs;
  DLTensor* const* outputs; /* num_outputs views; an entry is NULL when not wanted */
  int32_t num_outputs;
  const dlfuse_attr_t* attrs; /* num_attrs typed attributes */
  int32_t num_attrs;
  void* stream;    /* cudaStream_t, cl_command_queue, or NULL (default) */
  char* err;       /* where a failing kernel writes its message */
  size_t err_size; /* capacity of err in bytes, NUL included */
} dlfuse_kernel_args_t;

/* Every kernel has this signature. `state` is what open() returned, `kernel_data` is
 * the kernel table entry's own pointer. */
typedef dlfuse_status_t (*dlfuse_kernel_fn_t)(void* state, void* kernel_data, const dlfuse_kernel_args_t* args);

/* One entry of a plugin's kernel table: an op on one device type, for some dtypes.
 * Every tensor of a call has the same dtype (one of `dtypes`). */
typedef struct dlfuse_kernel_t {
  size_t struct_size;
  const char* op;      /* the op's name */
  int32_t device_type; /* a DLDeviceType */
  int32_t num_dtypes;
  const DLDataType* dtypes; /* the dtypes this kernel accepts */
  int32_t priority;         /* higher wins; first-party plugins use 100, tests use < 0 */
  dlfuse_kernel_fn_t fn;
  void* kernel_data; /* passed back to fn */
  /* ABI 1.1 */
  uint32_t flags; /* DLFUSE_KERNEL_* bits; 0 for none */
  /* ABI 1.2 */
  const dlfuse_op_schema_t* schema; /* for an op the core does not know: its schema, which
                                       the registry then validates calls by, lists and
                                       infers outputs by (NULL: calls get generic checks
                                       only); must be NULL for a core op. Read at load. */
  const int32_t* dtype_priorities;  /* NULL, or num_dtypes priorities: dtype_priorities[i]
                                       replaces `priority` for dtypes[i] */
} dlfuse_kernel_t;

/* The kernel takes the inputs that ABI 1.1 appended to an op of ABI 1.0 (today only
 * add_mul_activation_backward's `out`): it gets every input, NULL where absent. Without
 * the flag it gets the op's 1.0 inputs, and a call giving a newer one is refused. */
#define DLFUSE_KERNEL_TAKES_V1_1_INPUTS 1u

/* The descriptor returned by dlfuse_plugin_v1(). All function pointers are required
 * unless marked optional. Device services serve `device_type` only. */
typedef struct dlfuse_plugin_t {
  size_t struct_size;
  uint32_t abi_major;  /* DLFUSE_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;  /* DLFUSE_ABI_MINOR the plugin was built with */
  const char* name;    /* short, unique: "onednn", "cuda", "opencl", ... */
  const char* version; /* the plugin's own version string */
  int32_t device_type; /* the DLDeviceType whose devices this plugin serves */

  /* Prepare the plugin. A failure (no GPU, no driver) leaves the plugin listed as
   * unavailable with `err` as the reason; it is not fatal to the registry. */
  dlfuse_status_t (*open)(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size);
  /* Release what open() made. Called once if open() succeeded with a non-NULL state: when
   * the registry is destroyed, or at once if the rest of loading fails. */
  void (*close)(void* state);
  /* The kernel table, valid until close(). Called once after a successful open().
   * Entries are read with a stride of kernels[0].struct_size, so all must share it. */
  dlfuse_status_t (*get_kernels)(void* state, const dlfuse_kernel_t** kernels, int32_t* num_kernels, char* err,
                                 size_t err_size);

  /* Device services. For a CPU plugin: device_count 1, alloc = host memory aligned to at
   * least 64 bytes (callers of dlfuse_device_alloc rely on it; docs/abi.md). */
  dlfuse_status_t (*device_count)(void* state, int32_t* count, char* err, size_t err_size);
  /* Allocate nbytes (nbytes may be 0) on device_id; *ptr is what DLTensor.data takes. */
  dlfuse_status_t (*alloc)(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size);
  dlfuse_status_t (*free)(void* state, int32_t device_id, void* ptr, char* err, size_t err_size);
  /* Copy nbytes from src+src_offset to dst+dst_offset, ordered on `stream`. A copy that
   * touches host memory has completed when it returns. Device pointers are what alloc()
   * gave (a cl_mem on OpenCL), hence the separate byte offsets. */
  dlfuse_status_t (*copy)(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                          const void* src, size_t src_offset, size_t nbytes, void* stream, char* err, size_t err_size);
  /* Wait until everything enqueued on `stream` (NULL: the default) has finished. */
  dlfuse_status_t (*synchronize)(void* state, int32_t device_id, void* stream, char* err, size_t err_size);
} dlfuse_plugin_t;

/* The entry symbol's type. */
typedef const dlfuse_plugin_t* (*dlfuse_plugin_entry_fn_t)(void);

/* Find an attribute by key; NULL if absent. */
static inline const dlfuse_attr_t* dlfuse_find_attr(const dlfuse_kernel_args_t* args, int32_t key) {
  for (int32_t i = 0; i < args->num_attrs; ++i)
    if (args->attrs[i].key == key) return &args->attrs[i];
  return (const dlfuse_attr_t*)0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLFUSE_PLUGIN_H_ */

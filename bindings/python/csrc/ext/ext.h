/* dlfuse._ext's private header: the types its files share (View, Shape, Sig, Args), the
 * module state, libdlfuse's entry points as one list, and what each file offers the others.
 * Nothing here is seen outside the extension. */
#ifndef DLFUSE_PYTHON_EXT_H
#define DLFUSE_PYTHON_EXT_H

/* dlfuse._ext is the Python package's one native layer, on the CPython API.
 *
 * Ops: one callable type, OpFunction (op_function.c), for every op; its parameters come
 * from the op's schema (signature.c), so no op is named here. Per call (call.c): the
 * parsed arguments, each tensor's DLTensor (dlpack_import.c: the type's DLPack exchange API
 * where it has one, else __dlpack__), missing outputs allocated (the exchange API's
 * allocator, numpy.empty, or a Python fallback) with the shapes the schema's rules give,
 * dlfuse_op_call, the package's exception with the C message on failure.
 *
 * The rest of the package's use of libdlfuse goes through here too: questions about ops
 * (op_queries.c), the registry's admin calls and device memory (admin.c), dlfuse.Tensor's
 * DLPack export (dlpack_export.c).
 *
 * libdlfuse is dlopen'ed at load() (module.c) from the path the Python side resolved
 * ($DLFUSE_LIBRARY, the wheel's own copy, the prefix, the loader's path). A call through a
 * dlsym'ed pointer costs what a PLT call does.
 *
 * Everything here runs with the GIL held (released around the C calls that may take long);
 * the module state is process-wide. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <dlpack/dlpack.h>
#include <dlfuse/dlfuse.h>

#if DLPACK_MAJOR_VERSION > 1 || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 3)
#define DLFUSE_HAVE_EXCHANGE_API 1
#else
#define DLFUSE_HAVE_EXCHANGE_API 0
typedef struct DLPackExchangeAPI DLPackExchangeAPI;
#endif

#define MAX_NDIM DLFUSE_MAX_NDIM /* shapes are built on the stack; the registry takes no deeper ones */

/* What follows is the extension's own, hidden: its files then reach each other's state and
 * functions directly rather than through the GOT (the per-call path crosses them). */
#pragma GCC visibility push(hidden)

/* ---- libdlfuse's entry points ------------------------------------------------------------
 *
 * X(field, symbol, required): load() resolves each by dlsym into L.field. A required one
 * missing means the file is not libdlfuse; the ABI 1.2 ones (op schemas) are optional, so
 * that an older libdlfuse still loads and its ops say what they need (NULL here). */
#define EXT_LIBDLFUSE_SYMBOLS(X)                      \
  X(last_error, dlfuse_last_error, 1)                 \
  X(op_get, dlfuse_op_get, 1)                         \
  X(op_call, dlfuse_op_call, 1)                       \
  X(abi_version, dlfuse_abi_version, 1)               \
  X(registry_create, dlfuse_registry_create, 1)       \
  X(registry_destroy, dlfuse_registry_destroy, 1)     \
  X(registry_load, dlfuse_registry_load, 1)           \
  X(plugin_count, dlfuse_registry_plugin_count, 1)    \
  X(plugin_info, dlfuse_registry_plugin_info, 1)      \
  X(kernel_info, dlfuse_registry_kernel_info, 1)      \
  X(prefer, dlfuse_registry_prefer, 1)                \
  X(op_resolve, dlfuse_op_resolve, 1)                 \
  X(device_count, dlfuse_device_count, 1)             \
  X(device_alloc, dlfuse_device_alloc, 1)             \
  X(device_free, dlfuse_device_free, 1)               \
  X(device_copy, dlfuse_device_copy, 1)               \
  X(device_synchronize, dlfuse_device_synchronize, 1) \
  X(op_schema, dlfuse_op_schema, 0)                   \
  X(op_infer, dlfuse_op_infer_outputs, 0)             \
  X(op_count, dlfuse_registry_op_count, 0)            \
  X(reg_op_schema, dlfuse_registry_op_schema, 0)      \
  X(op_backward_plan, dlfuse_op_backward_plan, 0)

typedef struct {
#define X(field, symbol, required) __typeof__(&symbol) field;
  EXT_LIBDLFUSE_SYMBOLS(X)
#undef X
} LibFns;
extern LibFns L; /* all NULL until load() succeeds */

/* ---- module state ------------------------------------------------------------------------ */

typedef struct {
  void* lib;
  PyObject* errors[16];       /* status -> exception class; [0] is dlfuse.Error */
  PyObject* tensor_type;      /* dlfuse.Tensor */
  PyObject* alloc_fallback;   /* _core._alloc_fallback(like, shape, code, bits, dev_type, dev_id, registry) */
  PyObject* default_registry; /* _core.registry */
  PyObject* loader;           /* _core._load_ext */
  PyObject* activations;      /* name -> int */
  PyObject* activation_names; /* sorted list, for the message */
  PyObject* numpy_empty;
  PyTypeObject* ndarray;
  PyObject* default_registry_obj;
  PyObject *s_dlpack, *s_dlpack_device, *s_dlpack_c_api, *s_tensor_addr, *s_h, *s_dtype, *s_stream, *s_written,
      *s_max_version, *s_requires_grad, *s_detach, *s_cuda_stream, *s_ptr, *s_handle, *s_module, *s_ops, *s_registry;
  PyObject* kw_max_version; /* ("max_version",) */
  PyObject* kw_stream_max;  /* ("stream", "max_version") */
  PyObject* kw_stream;      /* ("stream",) */
  PyObject* kw_dtype;       /* ("dtype",) */
  PyObject* version_1_0;    /* (1, 0) */
} ExtState;
extern ExtState S;

static inline int is_none(PyObject* o) { return !o || o == Py_None; }
static inline int is_stream_device(int32_t t) { return t == kDLCUDA || t == kDLCUDAManaged || t == kDLROCM; }
/* A handle or address passed as an int (None: NULL). */
static inline void* as_ptr(PyObject* o) { return o == Py_None ? NULL : PyLong_AsVoidPtr(o); }

/* module.c: the package's exception for a status, with message (NULL: libdlfuse's last
 * error); always -1. */
int raise_status(int status, const char* message);
/* libdlfuse loaded (the first call loads it through the package's loader), or -1. */
int load_on_first_use(void);
static inline int need_loaded(void) { return L.op_call ? 0 : load_on_first_use(); }

/* ---- borrowed tensors (dlpack_import.c) -------------------------------------------------- */

typedef struct {
  DLTensor local; /* filled by dltensor_from_py_object_no_sync */
  DLTensor* t;
  DLManagedTensorVersioned* mv; /* owned: its deleter runs at release */
  DLManagedTensor* ml;
  PyObject* keep;               /* a detached torch tensor, kept while t is used */
  const DLPackExchangeAPI* api; /* the type's, when it has one */
  int read_only;
} View;

/* stream: what a __dlpack__ producer on a stream device is asked to sync to. */
int view_import(PyObject* obj, const char* name, void* stream, View* v);
void view_release(View* v);
int raise_read_only(const char* name); /* an output the producer exported read-only; -1 */

/* An output: view_import, refusing a tensor its producer exported read-only. */
static inline int view_import_out(PyObject* obj, const char* name, void* stream, View* v) {
  if (view_import(obj, name, stream, v) < 0) return -1;
  if (!v->read_only) return 0;
  view_release(v);
  return raise_read_only(name);
}

/* ---- shapes and call arguments (call.c) -------------------------------------------------- */

typedef struct {
  int ndim;
  int64_t d[MAX_NDIM];
} Shape;

PyObject* shape_tuple(const Shape* s);
int parse_shape(PyObject* o, const char* what, Shape* sh);
int parse_registry(PyObject* o, void** h); /* None: the default registry */
/* A by-name call's op and registry: the library loaded, *h the registry's handle; the name's
 * UTF-8, or NULL with the exception set. */
static inline const char* named_op(PyObject* name, PyObject* registry, void** h) {
  if (need_loaded() < 0 || parse_registry(registry, h) < 0) return NULL;
  return PyUnicode_AsUTF8(name);
}
int parse_needs_n(PyObject* o, int* needs, int n);
int pick_stream(const View* v, int given, void** stream);

/* ---- signatures (signature.c) -------------------------------------------------------------- */

enum { P_IN, P_OUT, P_ATTR, P_NEEDS, P_SHAPE, P_STREAM, P_REGISTRY };
#define MAX_PARAMS (3 * DLFUSE_MAX_ARGS + DLFUSE_MAX_ATTRS + 3)

typedef struct {
  PyObject* name; /* interned */
  int kind;
  int index; /* input, output or attribute index; P_SHAPE: the output's */
} Param;

typedef struct {
  int ready;
  int num_inputs, num_outputs, num_attrs;
  dlfuse_arg_schema_t in[DLFUSE_MAX_ARGS], out[DLFUSE_MAX_ARGS];
  dlfuse_attr_schema_t attr[DLFUSE_MAX_ATTRS];
  PyObject* names[2 * DLFUSE_MAX_ARGS + DLFUSE_MAX_ATTRS]; /* owned: the C names point into them */
  int nnames;
  int has_required_out;
  int since_minor;
  int shape_base_in[DLFUSE_MAX_ARGS]; /* P_SHAPE: the input the gradient belongs to, or -1 */
  int is_bias[DLFUSE_MAX_ARGS];       /* that input is named bias */
  Param p[MAX_PARAMS];
  int np, npos, nreq;
  int needs_param;                           /* index of P_NEEDS in p, or -1 */
  unsigned char attr_kind[DLFUSE_MAX_ATTRS]; /* attr_kind() of each attribute */
  int relu_index;                            /* the attribute that defaults to relu here (relu_default()), or -1 */
} Sig;

/* How the binding takes an attribute's value (attr_kind), and its names in schema(). */
enum { K_FLOAT, K_INT, K_FLAG, K_ACT };
extern const char* const kind_names[];

int sig_build(Sig* g, const dlfuse_op_schema_t* sc, PyObject* positional, Py_ssize_t nreq);
void sig_clear(Sig* g);
int find_schema(void* h, const char* name, dlfuse_op_schema_t* sc);
int op_with_schema(void* h, const char* name, dlfuse_op_t* op, dlfuse_op_schema_t* sc);
int attr_kind(const dlfuse_attr_schema_t* as);
int attr_value(const char* fn, const dlfuse_attr_schema_t* as, int kind, PyObject* value, dlfuse_attr_t* a);
int attrs_by_name(const char* name, const dlfuse_op_schema_t* sc, PyObject* dict, dlfuse_attr_t* attrs, int32_t* n);
PyObject* lower_name(const char* c);

/* ---- the call (call.c) ------------------------------------------------------------------- */

/* A call's arguments, by kind, after parsing. */
typedef struct {
  PyObject* in[DLFUSE_MAX_ARGS];
  PyObject* out[DLFUSE_MAX_ARGS];   /* NULL/None: not given; Py_True/Py_False; a tensor */
  PyObject* shape[DLFUSE_MAX_ARGS]; /* P_SHAPE values */
  dlfuse_attr_t attrs[DLFUSE_MAX_ATTRS];
  int nattrs;
  int needs[DLFUSE_MAX_ARGS];
  int all_outputs; /* dlfuse.call: every output allocated, the result always the outputs */
  PyObject* stream;
  PyObject* registry;
} Args;

/* Runs op with the parsed arguments; returns the result (fn names the op in messages). */
PyObject* run(const char* fn, const Sig* g, dlfuse_op_t op, Args* A);

/* ---- the module's parts ------------------------------------------------------------------ */

extern PyTypeObject OpFuncType; /* op_function.c */
/* Each file's module functions, added to dlfuse._ext by PyInit__ext. */
extern PyMethodDef ext_import_methods[], ext_export_methods[], ext_call_methods[], ext_op_function_methods[],
    ext_op_query_methods[], ext_admin_methods[];

#pragma GCC visibility pop

#endif

/* The module: PyInit__ext (its constants, the OpFunction type, every file's functions), the
 * module state, and load(), which dlopens libdlfuse and resolves its entry points from the
 * one list in ext.h; errors become the package's exceptions here. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>

#include "ext.h"
#include <dlfuse/plugin.h> /* DLFUSE_KERNEL_TAKES_V1_1_INPUTS */

ExtState S;
LibFns L;

/* ---- errors ------------------------------------------------------------------------------ */

int raise_status(int status, const char* message) {
  PyObject* cls = (status > 0 && status < 16 && S.errors[status]) ? S.errors[status] : S.errors[0];
  if (!message) message = L.last_error ? L.last_error() : "";
  if (!message) message = "";
  PyObject* msg = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  if (!msg) return -1;
  if (!cls) {
    PyErr_SetObject(PyExc_RuntimeError, msg);
    Py_DECREF(msg);
    return -1;
  }
  PyObject* st = PyLong_FromLong(status);
  PyObject* exc = st ? PyObject_CallFunctionObjArgs(cls, st, msg, NULL) : NULL;
  Py_XDECREF(st);
  Py_DECREF(msg);
  if (exc) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return -1;
}

/* The first op call loads libdlfuse through the package's loader (it raises
 * dlfuse.LibraryNotFound with what it tried), so `import dlfuse` never fails for that. */
int load_on_first_use(void) {
  if (L.op_call) return 0;
  if (S.loader) {
    PyObject* r = PyObject_CallNoArgs(S.loader);
    if (!r) return -1;
    Py_DECREF(r);
    if (L.op_call) return 0;
  }
  PyErr_SetString(PyExc_RuntimeError, "dlfuse._ext: load() has not run (import dlfuse, not dlfuse._ext)");
  return -1;
}

static PyObject* py_set_loader(PyObject* self, PyObject* fn) {
  (void)self;
  Py_XSETREF(S.loader, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* ---- load ------------------------------------------------------------------------------- */

/* Every entry point of EXT_LIBDLFUSE_SYMBOLS from lib into *fns; -1 (OSError) where a
 * required one is missing. */
static int resolve_symbols(void* lib, const char* path, LibFns* fns) {
/* memcpy: dlsym's object pointer into a function pointer, as POSIX has it */
#define X(field, symbol, required)                                                            \
  {                                                                                           \
    void* f = dlsym(lib, #symbol);                                                            \
    if (!f && (required)) {                                                                   \
      PyErr_Format(PyExc_OSError, "dlfuse._ext: %s has no %s: not libdlfuse", path, #symbol); \
      return -1;                                                                              \
    }                                                                                         \
    memcpy(&fns->field, &f, sizeof f);                                                        \
  }
  EXT_LIBDLFUSE_SYMBOLS(X)
#undef X
  return 0;
}

static PyObject* py_load(PyObject* self, PyObject* args) {
  (void)self;
  const char* path;
  PyObject *errors, *tensor_type, *fallback, *defreg;
  if (!PyArg_ParseTuple(args, "sO!OOO", &path, &PyTuple_Type, &errors, &tensor_type, &fallback, &defreg)) return NULL;
  /* RTLD_NOLOAD first: a library of this path already in the process is shared. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    PyErr_Format(PyExc_OSError, "dlfuse._ext: dlopen(%s): %s", path, e ? e : "failed");
    return NULL;
  }
  /* Into a copy first: a file that is not libdlfuse leaves the loaded one in use. */
  LibFns fns;
  if (resolve_symbols(lib, path, &fns) < 0) {
    dlclose(lib);
    return NULL;
  }
  if (S.lib) dlclose(S.lib);
  S.lib = lib;
  L = fns;
  for (int i = 0; i < 16; ++i) {
    Py_CLEAR(S.errors[i]);
    if (i < PyTuple_GET_SIZE(errors)) S.errors[i] = Py_NewRef(PyTuple_GET_ITEM(errors, i));
  }
  Py_XSETREF(S.tensor_type, Py_NewRef(tensor_type));
  Py_XSETREF(S.alloc_fallback, Py_NewRef(fallback));
  Py_XSETREF(S.default_registry, Py_NewRef(defreg));
  Py_CLEAR(S.default_registry_obj);
  /* the file the loader took (a bare name is searched on the loader's path) */
  Dl_info info;
  if (dladdr((void*)(uintptr_t)L.op_call, &info) && info.dli_fname) return PyUnicode_DecodeFSDefault(info.dli_fname);
  return PyUnicode_DecodeFSDefault(path);
}

static PyMethodDef methods[] = {
    {"load", py_load, METH_VARARGS, "load(path, errors, Tensor, alloc_fallback, registry) -> the loaded file"},
    {"set_loader", py_set_loader, METH_O, "The callable the first op call runs to load libdlfuse."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "dlfuse._ext",
                                    "dlfuse's compiled hot path over libdlfuse's C ABI",
                                    -1,
                                    methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

static PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

PyMODINIT_FUNC PyInit__ext(void) {
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
#define I(field, str) \
  if (!(S.field = intern(str))) goto fail;
  I(s_dlpack, "__dlpack__");
  I(s_dlpack_device, "__dlpack_device__");
  I(s_dlpack_c_api, "__dlpack_c_exchange_api__");
  I(s_tensor_addr, "_tensor_addr");
  I(s_h, "_h");
  I(s_dtype, "dtype");
  I(s_stream, "_stream");
  I(s_written, "_written");
  I(s_max_version, "max_version");
  I(s_requires_grad, "requires_grad");
  I(s_detach, "detach");
  I(s_cuda_stream, "cuda_stream");
  I(s_ptr, "ptr");
  I(s_handle, "handle");
  I(s_module, "__module__");
  I(s_ops, "_ops");
  I(s_registry, "registry");
#undef I
  S.kw_max_version = PyTuple_Pack(1, S.s_max_version);
  S.kw_stream = PyTuple_Pack(1, intern("stream"));
  S.kw_stream_max = PyTuple_Pack(2, intern("stream"), S.s_max_version);
  S.kw_dtype = PyTuple_Pack(1, S.s_dtype);
  S.version_1_0 = Py_BuildValue("(ii)", 1, 0);
  if (!S.kw_max_version || !S.kw_stream || !S.kw_stream_max || !S.kw_dtype || !S.version_1_0) goto fail;
  /* NumPy is a dependency of the package; its ndarray type gets the no-call device path. */
  PyObject* np = PyImport_ImportModule("numpy");
  if (np) {
    S.numpy_empty = PyObject_GetAttrString(np, "empty");
    S.ndarray = (PyTypeObject*)PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
  }
  PyErr_Clear();
  /* dlfuse_activation_t by name (gelu is gelu_erf) */
  static const struct {
    const char* n;
    int v;
  } acts[] = {{"identity", DLFUSE_ACT_IDENTITY},   {"relu", DLFUSE_ACT_RELU},     {"sigmoid", DLFUSE_ACT_SIGMOID},
              {"tanh", DLFUSE_ACT_TANH},           {"gelu", DLFUSE_ACT_GELU_ERF}, {"gelu_erf", DLFUSE_ACT_GELU_ERF},
              {"gelu_tanh", DLFUSE_ACT_GELU_TANH}, {"silu", DLFUSE_ACT_SILU}};
  S.activations = PyDict_New();
  if (!S.activations) goto fail;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; ++i) {
    PyObject* v = PyLong_FromLong(acts[i].v);
    if (!v || PyDict_SetItemString(S.activations, acts[i].n, v) < 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  S.activation_names = PyDict_Keys(S.activations);
  if (!S.activation_names || PyList_Sort(S.activation_names) < 0) goto fail;
  if (PyModule_AddObjectRef(m, "ACTIVATIONS", S.activations) < 0 ||
      PyModule_AddIntConstant(m, "ACT_COUNT", DLFUSE_ACT_COUNT) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_ACTIVATION", DLFUSE_ATTR_ACTIVATION) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_MULTIPLIER", DLFUSE_ATTR_MULTIPLIER) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_ALLOW_TF32", DLFUSE_ATTR_ALLOW_TF32) < 0 ||
      PyModule_AddIntConstant(m, "ATTR_OUTPUT_ACTIVATION", DLFUSE_ATTR_OUTPUT_ACTIVATION) < 0 ||
      PyModule_AddIntConstant(m, "KERNEL_TAKES_V1_1_INPUTS", DLFUSE_KERNEL_TAKES_V1_1_INPUTS) < 0 ||
      PyModule_AddIntConstant(m, "COPY_HOST_TO_DEVICE", DLFUSE_COPY_HOST_TO_DEVICE) < 0 ||
      PyModule_AddIntConstant(m, "COPY_DEVICE_TO_HOST", DLFUSE_COPY_DEVICE_TO_HOST) < 0 ||
      PyModule_AddIntConstant(m, "DISCOVER_DEFAULT", DLFUSE_DISCOVER_DEFAULT) < 0)
    goto fail;
  if (PyType_Ready(&OpFuncType) < 0 || PyModule_AddObjectRef(m, "OpFunction", (PyObject*)&OpFuncType) < 0) goto fail;
  PyMethodDef* const parts[] = {ext_op_function_methods, ext_op_query_methods, ext_import_methods,
                                ext_admin_methods,       ext_export_methods,   ext_call_methods};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i)
    if (PyModule_AddFunctions(m, parts[i]) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}

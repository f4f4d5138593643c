/* The registry's admin calls and device memory, on the loaded libdlfuse: what the package's
 * Registry and Tensor (dlfuse/_core.py) call with plain ints for handles, devices and
 * addresses. Each raises the package's exception with the C message on failure. */
#include <dlfcn.h>

#include "ext.h"

static int check(int st) { return st ? raise_status(st, NULL) : 0; }

static PyObject* py_abi_version(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (need_loaded() < 0) return NULL;
  uint32_t ma = 0, mi = 0;
  L.abi_version(&ma, &mi);
  return Py_BuildValue("(II)", ma, mi);
}

static PyObject* py_last_error(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (need_loaded() < 0) return NULL;
  const char* m = L.last_error();
  return PyUnicode_DecodeUTF8(m ? m : "", (Py_ssize_t)strlen(m ? m : ""), "replace");
}

/* registry_create(plugin_paths: str | None, discovery: int) -> handle */
static PyObject* py_registry_create(PyObject* self, PyObject* args) {
  (void)self;
  const char* paths = NULL;
  unsigned int discovery;
  if (!PyArg_ParseTuple(args, "zI:registry_create", &paths, &discovery) || need_loaded() < 0) return NULL;
  dlfuse_registry_options_t o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.discovery = discovery;
  o.plugin_paths = paths;
  dlfuse_registry_t h = NULL;
  int st;
  Py_BEGIN_ALLOW_THREADS st = L.registry_create(&o, &h);
  Py_END_ALLOW_THREADS if (check(st) < 0) return NULL;
  return PyLong_FromVoidPtr(h);
}

static PyObject* py_registry_destroy(PyObject* self, PyObject* h) {
  (void)self;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || need_loaded() < 0) return NULL;
  Py_BEGIN_ALLOW_THREADS L.registry_destroy((dlfuse_registry_t)p);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* registry_load(h, path) -> index; raises (the file stays listed) on failure */
static PyObject* py_registry_load(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char* path;
  if (!PyArg_ParseTuple(args, "Os:registry_load", &h, &path) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  int32_t idx = -1;
  int st;
  Py_BEGIN_ALLOW_THREADS st = L.registry_load((dlfuse_registry_t)p, path, &idx);
  Py_END_ALLOW_THREADS if (check(st) < 0) return NULL;
  return PyLong_FromLong(idx);
}

static PyObject* py_plugin_count(PyObject* self, PyObject* h) {
  (void)self;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || need_loaded() < 0) return NULL;
  int32_t n = 0;
  if (check(L.plugin_count((dlfuse_registry_t)p, &n)) < 0) return NULL;
  return PyLong_FromLong(n);
}

static PyObject* str_or_empty(const char* s) {
  return PyUnicode_DecodeUTF8(s ? s : "", (Py_ssize_t)strlen(s ? s : ""), "replace");
}

/* plugin_info(h, i) -> (name, version, path, available, reason, device_type, device_count,
 * abi_major, abi_minor, num_kernels) */
static PyObject* py_plugin_info(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int i;
  if (!PyArg_ParseTuple(args, "Oi:plugin_info", &h, &i) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_plugin_info_t in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  if (check(L.plugin_info((dlfuse_registry_t)p, i, &in)) < 0) return NULL;
  return Py_BuildValue("(NNNiNiiIIi)", str_or_empty(in.name), str_or_empty(in.version), str_or_empty(in.path),
                       (int)in.available, str_or_empty(in.reason), (int)in.device_type, (int)in.device_count,
                       in.abi_major, in.abi_minor, (int)in.num_kernels);
}

/* kernel_info(h, plugin, kernel) -> (op, device_type, [(code, bits)], priority, flags) */
static PyObject* py_kernel_info(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int pl, k;
  if (!PyArg_ParseTuple(args, "Oii:kernel_info", &h, &pl, &k) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_kernel_info_t ki;
  memset(&ki, 0, sizeof ki);
  ki.struct_size = sizeof ki;
  if (check(L.kernel_info((dlfuse_registry_t)p, pl, k, &ki)) < 0) return NULL;
  PyObject* dts = PyList_New(0);
  for (int32_t j = 0; dts && j < ki.num_dtypes && ki.dtypes; ++j) {
    PyObject* t = Py_BuildValue("(ii)", (int)ki.dtypes[j].code, (int)ki.dtypes[j].bits);
    if (!t || PyList_Append(dts, t) < 0) Py_CLEAR(dts);
    Py_XDECREF(t);
  }
  if (!dts) return NULL;
  return Py_BuildValue("(NiNiI)", str_or_empty(ki.op), (int)ki.device_type, dts, (int)ki.priority, ki.flags);
}

/* prefer(h, op | None, plugin_name | None) */
static PyObject* py_prefer(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char *op, *name;
  if (!PyArg_ParseTuple(args, "Ozz:prefer", &h, &op, &name) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred() || check(L.prefer((dlfuse_registry_t)p, op, name)) < 0) return NULL;
  Py_RETURN_NONE;
}

/* resolve(h, op, device_type, code, bits) -> plugin index */
static PyObject* py_resolve(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  const char* name;
  int dev, code, bits;
  if (!PyArg_ParseTuple(args, "Osiii:resolve", &h, &name, &dev, &code, &bits) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  dlfuse_op_t op = NULL;
  if (check(L.op_get((dlfuse_registry_t)p, name, &op)) < 0) return NULL;
  DLDataType dt = {(uint8_t)code, (uint8_t)bits, 1};
  int32_t idx = -1;
  if (check(L.op_resolve(op, dev, dt, &idx)) < 0) return NULL;
  return PyLong_FromLong(idx);
}

static PyObject* py_device_count(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int dev;
  if (!PyArg_ParseTuple(args, "Oi:device_count", &h, &dev) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  int32_t n = 0;
  if (check(L.device_count((dlfuse_registry_t)p, dev, &n)) < 0) return NULL;
  return PyLong_FromLong(n);
}

/* device_alloc(h, device_type, device_id, nbytes) -> address */
static PyObject* py_device_alloc(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* h;
  int dt, di;
  unsigned long long n;
  if (!PyArg_ParseTuple(args, "OiiK:device_alloc", &h, &dt, &di, &n) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  void* ptr = NULL;
  int st;
  Py_BEGIN_ALLOW_THREADS st = L.device_alloc((dlfuse_registry_t)p, d, (size_t)n, &ptr);
  Py_END_ALLOW_THREADS if (check(st) < 0) return NULL;
  return PyLong_FromVoidPtr(ptr);
}

static PyObject* py_device_free(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *ptr;
  int dt, di;
  if (!PyArg_ParseTuple(args, "OiiO:device_free", &h, &dt, &di, &ptr) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  void* q = as_ptr(ptr);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  if (check(L.device_free((dlfuse_registry_t)p, d, q)) < 0) return NULL;
  Py_RETURN_NONE;
}

/* device_copy(h, device_type, device_id, kind, dst, dst_offset, src, src_offset, nbytes, stream) */
static PyObject* py_device_copy(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *dst, *src, *stream;
  int dt, di, kind;
  unsigned long long doff, soff, n;
  if (!PyArg_ParseTuple(args, "OiiiOKOKKO:device_copy", &h, &dt, &di, &kind, &dst, &doff, &src, &soff, &n, &stream) ||
      need_loaded() < 0)
    return NULL;
  void* p = as_ptr(h);
  void* dp = as_ptr(dst);
  void* sp = as_ptr(src);
  void* s = as_ptr(stream);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  int st;
  Py_BEGIN_ALLOW_THREADS st = L.device_copy((dlfuse_registry_t)p, d, (dlfuse_copy_kind_t)kind, dp, (size_t)doff, sp,
                                            (size_t)soff, (size_t)n, s);
  Py_END_ALLOW_THREADS if (check(st) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject* py_device_synchronize(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *h, *stream;
  int dt, di;
  if (!PyArg_ParseTuple(args, "OiiO:device_synchronize", &h, &dt, &di, &stream) || need_loaded() < 0) return NULL;
  void* p = as_ptr(h);
  void* s = as_ptr(stream);
  if (PyErr_Occurred()) return NULL;
  DLDevice d = {(DLDeviceType)dt, di};
  int st;
  Py_BEGIN_ALLOW_THREADS st = L.device_synchronize((dlfuse_registry_t)p, d, s);
  Py_END_ALLOW_THREADS if (check(st) < 0) return NULL;
  Py_RETURN_NONE;
}

/* symbol(name) -> the address of a libdlfuse function (for the XLA handlers, which take
 * libdlfuse's entry points as pointers) */
static PyObject* py_symbol(PyObject* self, PyObject* name) {
  (void)self;
  const char* n = PyUnicode_AsUTF8(name);
  if (!n || need_loaded() < 0) return NULL;
  void* f = dlsym(S.lib, n);
  if (!f) {
    PyErr_Format(PyExc_AttributeError, "libdlfuse has no symbol %s", n);
    return NULL;
  }
  return PyLong_FromVoidPtr(f);
}

PyMethodDef ext_admin_methods[] = {
    {"abi_version", py_abi_version, METH_NOARGS, "(major, minor) of the loaded libdlfuse"},
    {"last_error", py_last_error, METH_NOARGS, "the calling thread's last C error message"},
    {"registry_create", py_registry_create, METH_VARARGS, "registry_create(plugin_paths, discovery) -> handle"},
    {"registry_destroy", py_registry_destroy, METH_O, "registry_destroy(handle)"},
    {"registry_load", py_registry_load, METH_VARARGS, "registry_load(handle, path) -> plugin index"},
    {"plugin_count", py_plugin_count, METH_O, "plugin_count(handle)"},
    {"plugin_info", py_plugin_info, METH_VARARGS,
     "plugin_info(handle, i) -> (name, version, path, available, reason, device_type, device_count, abi_major, "
     "abi_minor, num_kernels)"},
    {"kernel_info", py_kernel_info, METH_VARARGS,
     "kernel_info(handle, plugin, kernel) -> (op, device_type, [(code, bits)], priority, flags)"},
    {"prefer", py_prefer, METH_VARARGS, "prefer(handle, op or None, plugin name or None)"},
    {"resolve", py_resolve, METH_VARARGS, "resolve(handle, op, device_type, code, bits) -> plugin index"},
    {"device_count", py_device_count, METH_VARARGS, "device_count(handle, device_type)"},
    {"device_alloc", py_device_alloc, METH_VARARGS, "device_alloc(handle, device_type, device_id, nbytes) -> address"},
    {"device_free", py_device_free, METH_VARARGS, "device_free(handle, device_type, device_id, address)"},
    {"device_copy", py_device_copy, METH_VARARGS,
     "device_copy(handle, device_type, device_id, kind, dst, dst_offset, src, src_offset, nbytes, stream)"},
    {"device_synchronize", py_device_synchronize, METH_VARARGS,
     "device_synchronize(handle, device_type, device_id, stream)"},
    {"symbol", py_symbol, METH_O, "the address of a libdlfuse function"},
    {NULL, NULL, 0, NULL}};

/* DLPack export of dlfuse.Tensor: the DLTensor describing its memory (dltensor) and the
 * capsules its __dlpack__ hands out (export), whose deleters drop the owner they hold. */
#include "ext.h"

/* A DLTensor describing a dlfuse.Tensor's memory, in a capsule that owns it and its shape:
 * dltensor(data, device_type, device_id, shape, code, bits) -> (capsule, address). */
typedef struct {
  DLTensor t;
  int64_t shape[DLFUSE_MAX_NDIM];
} OwnedTensor;

static void owned_tensor_free(PyObject* cap) { PyMem_Free(PyCapsule_GetPointer(cap, "dlfuse.dltensor")); }

static PyObject* py_dltensor(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *data, *shape;
  int dt, di, code, bits;
  if (!PyArg_ParseTuple(args, "OiiO!ii:dltensor", &data, &dt, &di, &PyTuple_Type, &shape, &code, &bits)) return NULL;
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd > DLFUSE_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "dlfuse.Tensor: shape: expected at most %d dims, got %zd", DLFUSE_MAX_NDIM, nd);
    return NULL;
  }
  OwnedTensor* o = PyMem_Calloc(1, sizeof *o);
  if (!o) return PyErr_NoMemory();
  o->t.data = as_ptr(data);
  for (Py_ssize_t i = 0; i < nd; ++i) o->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
  if (PyErr_Occurred()) {
    PyMem_Free(o);
    return NULL;
  }
  o->t.device.device_type = (DLDeviceType)dt;
  o->t.device.device_id = di;
  o->t.ndim = (int32_t)nd;
  o->t.dtype.code = (uint8_t)code;
  o->t.dtype.bits = (uint8_t)bits;
  o->t.dtype.lanes = 1;
  o->t.shape = o->shape;
  PyObject* cap = PyCapsule_New(o, "dlfuse.dltensor", owned_tensor_free);
  if (!cap) {
    PyMem_Free(o);
    return NULL;
  }
  return Py_BuildValue("(NN)", cap, PyLong_FromVoidPtr(&o->t));
}

/* DLPack export of a dlfuse.Tensor: export(owner, tensor_address, versioned) -> capsule. The
 * managed tensor holds a copy of the DLTensor and a reference to the owner, dropped by its
 * deleter (which a consumer may call from any thread, with its own exception pending) or by
 * the capsule's destructor when no consumer took it. */
typedef struct {
  DLManagedTensorVersioned mv;
  DLManagedTensor ml;
  int64_t shape[DLFUSE_MAX_NDIM];
  PyObject* owner;
} Export;

static void export_release_owner(Export* e) {
  if (!Py_IsInitialized()) return; /* a consumer freeing after interpreter exit */
  PyGILState_STATE g = PyGILState_Ensure();
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* pending = PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
#endif
  Py_XDECREF(e->owner);
  PyMem_Free(e);
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(pending);
#else
  PyErr_Restore(type, value, tb);
#endif
  PyGILState_Release(g);
}

static void export_deleter_v(DLManagedTensorVersioned* m) { export_release_owner((Export*)m->manager_ctx); }
static void export_deleter_l(DLManagedTensor* m) { export_release_owner((Export*)m->manager_ctx); }

static void export_capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned"))
    export_deleter_v((DLManagedTensorVersioned*)PyCapsule_GetPointer(cap, "dltensor_versioned"));
  else if (PyCapsule_IsValid(cap, "dltensor"))
    export_deleter_l((DLManagedTensor*)PyCapsule_GetPointer(cap, "dltensor"));
}

static PyObject* py_export(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *owner, *addr;
  int versioned;
  if (!PyArg_ParseTuple(args, "OOp:export", &owner, &addr, &versioned)) return NULL;
  const DLTensor* t = (const DLTensor*)as_ptr(addr);
  if (!t) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dlfuse.Tensor: the tensor is freed");
    return NULL;
  }
  Export* e = PyMem_Calloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  DLTensor* dst = versioned ? &e->mv.dl_tensor : &e->ml.dl_tensor;
  *dst = *t;
  memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)(t->ndim > 0 ? t->ndim : 0));
  dst->shape = e->shape;
  dst->strides = NULL;
  e->owner = Py_NewRef(owner);
  e->mv.version.major = 1;
  e->mv.version.minor = 0;
  e->mv.manager_ctx = e;
  e->mv.deleter = export_deleter_v;
  e->ml.manager_ctx = e;
  e->ml.deleter = export_deleter_l;
  PyObject* cap = versioned ? PyCapsule_New(&e->mv, "dltensor_versioned", export_capsule_destructor)
                            : PyCapsule_New(&e->ml, "dltensor", export_capsule_destructor);
  if (!cap) {
    Py_DECREF(owner);
    PyMem_Free(e);
  }
  return cap;
}

PyMethodDef ext_export_methods[] = {
    {"dltensor", py_dltensor, METH_VARARGS,
     "dltensor(data, device_type, device_id, shape, code, bits) -> (owner capsule, DLTensor address)"},
    {"export", py_export, METH_VARARGS, "export(owner, DLTensor address, versioned) -> a DLPack capsule holding owner"},
    {NULL, NULL, 0, NULL}};

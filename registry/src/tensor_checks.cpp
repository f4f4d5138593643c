#include "tensor_checks.hpp"

#include <cstdio>
#include <cstring>
#include <string>

#include "error.hpp"
#include "format.hpp"

namespace dlfuse {
namespace {

bool mul_ok(int64_t a, int64_t b, int64_t* r) { return !__builtin_mul_overflow(a, b, r); }
bool add_ok(int64_t a, int64_t b, int64_t* r) { return !__builtin_add_overflow(a, b, r); }

std::string hex_address(uintptr_t a) {
  char buf[2 + 2 * sizeof a + 1];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

// An output written through two index tuples to one address would race with itself.
// Sufficient test: with dims sorted by stride, each stride clears the span of the
// smaller ones. Size-1 dims never repeat an address.
bool self_overlapping(const DLTensor* t, const int64_t* strides) {
  int64_t s[kMaxNdim], n[kMaxNdim];
  int32_t k = 0;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] == 0) return false;
    if (t->shape[i] == 1) continue;
    int32_t j = k++;
    while (j > 0 && s[j - 1] > strides[i]) {
      s[j] = s[j - 1];
      n[j] = n[j - 1];
      --j;
    }
    s[j] = strides[i];
    n[j] = t->shape[i];
  }
  int64_t span = 1;  // elements a stride must reach past
  for (int32_t i = 0; i < k; ++i) {
    if (s[i] < span) return true;
    // s*n may pass 2^63 although the extent, (n-1)*s, fits: then no later stride can
    // clear the span, so any later dim repeats an address.
    if (__builtin_mul_overflow(s[i], n[i], &span)) return i + 1 < k;
  }
  return false;
}

}  // namespace

// Messages name the op, the argument, what is wrong, its value and what was expected.
#define DLFUSE_BAD(what, expected, actual)                                                        \
  fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': %s is %s; expected %s", op, arg, what, \
       std::string(actual).c_str(), std::string(expected).c_str())

dlfuse_status_t check_layout(const char* op, const char* arg, const DLTensor* t, bool is_output, TensorView* v) {
  if (!t) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor", op, arg);
  if (t->ndim < 0 || t->ndim > kMaxNdim)
    return DLFUSE_BAD("ndim", "0.." + std::to_string(kMaxNdim), std::to_string(t->ndim));
  if (t->ndim > 0 && !t->shape) return DLFUSE_BAD("shape", "a pointer to ndim sizes", "NULL");
  if (t->dtype.lanes != 1) return DLFUSE_BAD("dtype", "lanes == 1", dtype_name(t->dtype));
  if (t->dtype.bits == 0 || t->dtype.bits % 8 != 0)
    return DLFUSE_BAD("dtype", "a whole number of bytes per element", dtype_name(t->dtype));
  v->t = t;
  v->itemsize = t->dtype.bits / 8;

  int64_t numel = 1;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0)
      return DLFUSE_BAD(("shape[" + std::to_string(i) + "]").c_str(), ">= 0", std::to_string(t->shape[i]));
    if (!mul_ok(numel, t->shape[i], &numel))
      return DLFUSE_BAD("element count", "<= 2^63-1", "larger (shape " + shape_string(t->shape, t->ndim) + ")");
  }
  v->numel = numel;

  if (t->strides) {
    for (int32_t i = 0; i < t->ndim; ++i) {
      if (t->strides[i] < 0)
        return DLFUSE_BAD(("strides[" + std::to_string(i) + "]").c_str(), ">= 0 (negative strides are not supported)",
                          std::to_string(t->strides[i]));
      v->strides[i] = t->strides[i];
    }
  } else {
    int64_t s = 1;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
      v->strides[i] = s;
      // Only matters when another dim is 0 and numel stayed small.
      if (!mul_ok(s, t->shape[i] > 0 ? t->shape[i] : 1, &s))
        return DLFUSE_BAD("compact strides", "<= 2^63-1", "larger (shape " + shape_string(t->shape, t->ndim) + ")");
    }
  }
  v->bytes = 0;
  if (numel == 0) return DLFUSE_STATUS_OK;

  // Index of the farthest element: numel - 1 for compact row-major (numel fits, so no
  // overflow); for explicit strides, sum (shape[i] - 1) * strides[i], checked.
  int64_t last = t->strides ? 0 : numel - 1;
  for (int32_t i = 0; t->strides && i < t->ndim; ++i) {
    int64_t step;
    if (!mul_ok(t->shape[i] - 1, v->strides[i], &step) || !add_ok(last, step, &last))
      return DLFUSE_BAD(
          "extent", "<= 2^63-1 elements",
          "larger (shape " + shape_string(t->shape, t->ndim) + ", strides " + shape_string(v->strides, t->ndim) + ")");
  }
  if (!add_ok(last, 1, &v->bytes) || !mul_ok(v->bytes, v->itemsize, &v->bytes))
    return DLFUSE_BAD("byte extent", "<= 2^63-1",
                      "larger (shape " + shape_string(t->shape, t->ndim) + ", strides " +
                          shape_string(v->strides, t->ndim) + ", " + std::to_string(v->itemsize) + "-byte items)");

  // Compact row-major never maps two elements to one address.
  if (is_output && t->strides && self_overlapping(t, v->strides))
    return DLFUSE_BAD("layout", "no two elements at one address (an output cannot be a broadcast view)",
                      "strides " + shape_string(v->strides, t->ndim) + " for shape " + shape_string(t->shape, t->ndim));
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t check_placement_slow(const char* op, const char* arg, TensorView* v) {
  const DLTensor* t = v->t;
  v->space = data_is_handle(t->device.device_type) ? reinterpret_cast<uintptr_t>(t->data) : 0;
  v->lo = v->hi = 0;
  if (t->byte_offset > static_cast<uint64_t>(INT64_MAX))
    return DLFUSE_BAD("byte_offset", "<= 2^63-1", std::to_string(t->byte_offset));
  if (v->numel == 0) return DLFUSE_STATUS_OK;
  int64_t end;
  if (!add_ok(v->bytes, static_cast<int64_t>(t->byte_offset), &end))
    return DLFUSE_BAD("byte extent + byte_offset", "<= 2^63-1",
                      std::to_string(v->bytes) + " + " + std::to_string(t->byte_offset));
  if (!t->data) return DLFUSE_BAD("data", "a non-NULL pointer for a non-empty tensor", "NULL");

  if (v->space == 0) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(t->data);
    if (addr > UINTPTR_MAX - static_cast<uint64_t>(end))
      return DLFUSE_BAD("data + byte extent", "inside the address space", "past its end");
    const uintptr_t first = addr + t->byte_offset;
    // A power-of-two item size: a mask, not a 64-bit division (a tenth of a call's dispatch).
    const uint64_t mask = static_cast<uint64_t>(v->itemsize) - 1;
    if ((v->itemsize & mask) == 0 && (first & mask) != 0)
      return DLFUSE_BAD(
          "data + byte_offset", "aligned to " + std::to_string(v->itemsize) + " bytes",
          hex_address(first) + " (data " + hex_address(addr) + ", byte_offset " + std::to_string(t->byte_offset) + ")");
    v->lo = first;
    v->hi = first + static_cast<uint64_t>(v->bytes);
  } else {
    if (t->byte_offset % v->itemsize != 0)
      return DLFUSE_BAD("byte_offset", "a multiple of " + std::to_string(v->itemsize), std::to_string(t->byte_offset));
    v->lo = t->byte_offset;
    v->hi = static_cast<uint64_t>(end);
  }
  return DLFUSE_STATUS_OK;
}

#undef DLFUSE_BAD

bool same_view(const TensorView& a, const TensorView& b) {
  const DLTensor* x = a.t;
  const DLTensor* y = b.t;
  if (x->data != y->data || x->byte_offset != y->byte_offset || x->ndim != y->ndim) return false;
  if (x->dtype.code != y->dtype.code || x->dtype.bits != y->dtype.bits) return false;
  for (int32_t i = 0; i < x->ndim; ++i)
    if (x->shape[i] != y->shape[i] || (x->shape[i] > 1 && a.strides[i] != b.strides[i])) return false;
  return true;
}

bool broadcast_shapes(const int64_t* a, int32_t na, const int64_t* b, int32_t nb, int64_t* out, int32_t* nout) {
  const int32_t n = na > nb ? na : nb;
  if (n > kMaxNdim) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t da = i < n - na ? 1 : a[i - (n - na)];
    const int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return true;
}

bool broadcasts_to(const int64_t* from, int32_t nfrom, const int64_t* to, int32_t nto) {
  if (nfrom > nto) return false;
  for (int32_t i = 0; i < nfrom; ++i) {
    const int64_t f = from[i], d = to[nto - nfrom + i];
    if (f != d && f != 1) return false;
  }
  return true;
}

bool same_shape(const int64_t* a, int32_t na, const int64_t* b, int32_t nb) {
  if (na != nb) return false;
  for (int32_t i = 0; i < na; ++i)  // a loop, not memcmp: shapes are short and this runs per call
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace dlfuse

// Repeated layouts: each thread keeps the layouts of its last valid calls of each known op
// (8 per op), and a call repeating one reruns only the checks that read data and
// byte_offset (registry/src/layout_cache.hpp). These tests hold that a repeat is judged exactly as a
// first call is: every refusal, status and message equals what a thread with no history
// gets, and a change to anything in the same structs (shape or stride arrays written in
// place, dtype, device, optional outputs, attributes) is seen.
#include <random>
#include <thread>

#include "unit_common.h"

namespace unit {
namespace {

struct Outcome {
  dlfuse_status_t status;
  std::string message;  // empty when OK
  bool operator==(const Outcome& o) const { return status == o.status && message == o.message; }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << dlfuse_status_string(o.status) << " \"" << o.message << "\"";
}

template <class F>
Outcome outcome_of(F&& call) {
  const dlfuse_status_t s = call();
  return {s, s == DLFUSE_STATUS_OK ? std::string() : last_error()};
}

// The same call on a new thread, which has called nothing before.
template <class F>
Outcome on_fresh_thread(F&& call) {
  Outcome o{};
  std::thread([&] { o = outcome_of(call); }).join();
  return o;
}

class RepeatedLayout : public EchoTest {
 protected:
  dlfuse_status_t ama(AmaCase& c, double mul = 1.0) {
    return dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, mul, DLFUSE_ACT_RELU, c.out, nullptr);
  }
  // Warms this thread with a valid call of `c`'s layout, then runs `call` here and on a
  // fresh thread: both outcomes must agree and be a refusal the plugin never saw.
  template <class Warm, class F>
  void expect_refused_like_a_first_call(Warm&& warm, F&& call, const char* needle) {
    ASSERT_EQ(warm(), DLFUSE_STATUS_OK) << last_error();
    const int64_t before = calls();
    const Outcome here = outcome_of(call);
    const Outcome fresh = on_fresh_thread(call);
    EXPECT_EQ(calls(), before) << "the plugin saw a refused call";
    EXPECT_EQ(here.status, DLFUSE_STATUS_INVALID_ARGUMENT) << here;
    EXPECT_EQ(here, fresh) << "a repeat of the layout was judged differently from a first call";
    EXPECT_MSG_HAS(here.message, needle);
  }
};

TEST_F(RepeatedLayout, PlacementRefusalsAfterAValidCall) {
  AmaCase c;
  const DLTensor saved_out = *c.out.dl();
  const DLTensor saved_y = *c.y.dl();
  auto warm = [&] {
    *c.out.dl() = saved_out;
    *c.y.dl() = saved_y;
    return ama(c);
  };
  auto call = [&] { return ama(c); };
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->data = nullptr;
        return call();
      },
      "'y'");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->byte_offset = 2;
        return call();
      },
      "aligned");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->byte_offset = uint64_t{1} << 63;
        return call();
      },
      "byte_offset");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->byte_offset = INT64_MAX - 8;
        return call();
      },
      "byte extent");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->data = reinterpret_cast<void*>(UINTPTR_MAX - 15);
        return call();
      },
      "address space");
  // Overlaps: out one element into x, out exactly y, out over bias.
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->data = c.x.dl()->data;
        c.out.dl()->byte_offset = 4;
        return call();
      },
      "overlaps");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->data = c.y.dl()->data;
        return call();
      },
      "'y'");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.out.dl()->data = c.bias.dl()->data;
        return call();
      },
      "'bias'");
  ASSERT_EQ(warm(), DLFUSE_STATUS_OK) << last_error();
}

TEST_F(RepeatedLayout, NewPointersOfARepeatedLayoutAreComputedOn) {
  // Two sets of buffers, one layout: every call must use its own pointers.
  AmaCase a(4, 5, 0.0f), b(4, 5, 3.0f);
  for (int round = 0; round < 3; ++round) {
    for (AmaCase* c : {&a, &b}) {
      c->out.fill(-777.0f);
      ASSERT_EQ(ama(*c, 0.5), DLFUSE_STATUS_OK) << last_error();
      for (int64_t i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(c->out.f()[i], c->expect(i, 0.5, true)) << i;
    }
  }
  // In place on x after out-of-place calls of the same layout, then out of place again.
  AmaCase ref(4, 5, 0.0f);
  ASSERT_EQ(dlfuse_add_mul_activation(reg, a.x, a.y, a.bias, 0.5, DLFUSE_ACT_RELU, a.x, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  for (int64_t i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(a.x.f()[i], ref.expect(i, 0.5, true)) << i;
  EXPECT_EQ(calls(), 7);
}

TEST_F(RepeatedLayout, ManyLayoutsInTurn) {
  // Ten layouts called in turn, more than are remembered: each call computes on its own
  // tensors, and a refusal in any of them is a first call's refusal.
  std::vector<std::unique_ptr<AmaCase>> cases;
  for (int64_t m = 1; m <= 10; ++m) cases.push_back(std::make_unique<AmaCase>(m, 3 + m % 4, 0.5f * float(m)));
  for (int round = 0; round < 3; ++round) {
    for (auto& c : cases) {
      c->out.fill(-777.0f);
      ASSERT_EQ(ama(*c, 1.5), DLFUSE_STATUS_OK) << last_error();
      for (int64_t i = 0; i < c->out.numel(); ++i) EXPECT_FLOAT_EQ(c->out.f()[i], c->expect(i, 1.5, true)) << i;
    }
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    AmaCase& c = *cases[k];
    void* const out_data = c.out.dl()->data;
    // out onto y's memory, which it covers exactly: bias's is shorter than out, so out laid
    // on it would reach whatever the allocator put next (y, at times).
    expect_refused_like_a_first_call(
        [&] {
          c.out.dl()->data = out_data;
          return ama(c);
        },
        [&] {
          c.out.dl()->data = c.y.dl()->data;
          return ama(c);
        },
        "input 'y'");
    c.out.dl()->data = out_data;
    // and the layouts of the next ones stay remembered correctly
    AmaCase& d = *cases[(k + 1) % cases.size()];
    ASSERT_EQ(ama(d, 2.0), DLFUSE_STATUS_OK) << last_error();
    for (int64_t i = 0; i < d.out.numel(); ++i) EXPECT_FLOAT_EQ(d.out.f()[i], d.expect(i, 2.0, true)) << i;
  }
}

TEST_F(RepeatedLayout, RememberedLayoutsInTurn) {
  // Five layouts in turn, all remembered: every call after the first round matches one
  // that is not the last matched. Each must be judged with its own extents (out over x's
  // last element only) and run with its own attributes (multipliers differ).
  std::vector<std::unique_ptr<AmaCase>> cases;
  for (int64_t m = 1; m <= 5; ++m) cases.push_back(std::make_unique<AmaCase>(m, 2 + m, 0.25f * float(m)));
  auto mul_of = [](size_t k) { return 1.0 + double(k); };
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < cases.size(); ++k) {
      AmaCase& c = *cases[k];
      c.out.fill(-777.0f);
      ASSERT_EQ(ama(c, mul_of(k)), DLFUSE_STATUS_OK) << last_error();
      for (int64_t i = 0; i < c.out.numel(); ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, mul_of(k), true)) << k;
    }
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    AmaCase& c = *cases[k];
    void* const out_data = c.out.dl()->data;
    const uint64_t last_x = uint64_t(c.x.numel() - 1) * sizeof(float);
    auto warm = [&] {
      c.out.dl()->data = out_data;
      c.out.dl()->byte_offset = 0;
      return ama(c, mul_of(k));
    };
    expect_refused_like_a_first_call(
        warm,
        [&] {
          c.out.dl()->data = c.x.dl()->data;
          c.out.dl()->byte_offset = last_x;
          return ama(c, mul_of(k));
        },
        "'x'");
    ASSERT_EQ(warm(), DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(ama(*cases[(k + 2) % cases.size()], mul_of((k + 2) % cases.size())), DLFUSE_STATUS_OK);
  }
}

TEST_F(RepeatedLayout, InPlaceNeedsTheSameStridesOnARepeat) {
  // out transposed ({1, 3}) over x's memory is not x, also when the layout is remembered.
  Tensor x({3, 3}), y({3, 3}), bias({3}), out({3, 3});
  out.strides({1, 3});
  auto call = [&] { return dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr); };
  void* const own = out.dl()->data;
  expect_refused_like_a_first_call(
      [&] {
        out.dl()->data = own;
        return call();
      },
      [&] {
        out.dl()->data = x.dl()->data;
        return call();
      },
      "'out'");
  // The exact in-place view of the same remembered layout is accepted.
  Tensor out2({3, 3});
  out2.dl()->data = x.dl()->data;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out2, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  ASSERT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out2, nullptr), DLFUSE_STATUS_OK)
      << last_error();
}

TEST_F(RepeatedLayout, DeepTensorsAreCheckedInFull) {
  // Layouts of more than 6 dims are not remembered; their calls still pass and fail alike.
  std::vector<int64_t> shape(8, 1);
  shape[7] = 3;
  Tensor x(shape), y(shape), bias({3}), out(shape);
  ASSERT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  auto call = [&] { return dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr); };
  expect_refused_like_a_first_call(
      call,
      [&] {
        out.dl()->data = y.dl()->data;
        return call();
      },
      "'y'");
}

TEST_F(RepeatedLayout, LayoutWrittenInPlaceIsSeen) {
  AmaCase c(2, 3);
  auto call = [&] { return ama(c); };
  auto warm = [&] {
    int64_t* shape = c.y.dl()->shape;
    shape[0] = 2;
    shape[1] = 3;
    c.y.dl()->strides = nullptr;
    c.y.dl()->dtype = f32();
    c.y.dl()->device = DLDevice{kDLCPU, 0};
    c.y.dl()->ndim = 2;
    return ama(c);
  };
  // The same shape array, rewritten between calls.
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->shape[1] = 4;
        return call();
      },
      "'y'");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->shape[0] = -1;
        return call();
      },
      "shape[0]");
  // Strides appear, then change in place.
  int64_t strides[2] = {3, 1};
  ASSERT_EQ(warm(), DLFUSE_STATUS_OK);
  c.y.dl()->strides = strides;
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();  // compact strides, given
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();  // and repeated
  strides[1] = -1;
  const Outcome here = outcome_of(call);
  EXPECT_EQ(here, on_fresh_thread(call));
  EXPECT_MSG_HAS(here.message, "strides[1]");
  // Out's strides rewritten into a broadcast view: an output may not repeat an address.
  int64_t out_strides[2] = {3, 1};
  ASSERT_EQ(warm(), DLFUSE_STATUS_OK);
  c.out.dl()->strides = out_strides;
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();
  out_strides[0] = 0;
  const Outcome bcast = outcome_of(call);
  EXPECT_EQ(bcast, on_fresh_thread(call));
  EXPECT_MSG_HAS(bcast.message, "'out'");
  c.out.dl()->strides = nullptr;
  // dtype, device and ndim of the same struct.
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->dtype = f64();
        return call();
      },
      "float64");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->device.device_id = 1;
        return call();
      },
      "'y'");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->ndim = 17;
        return call();
      },
      "ndim");
  int64_t* const shape = c.y.dl()->shape;
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->shape = nullptr;
        return call();
      },
      "shape");
  c.y.dl()->shape = shape;
  expect_refused_like_a_first_call(
      warm,
      [&] {
        c.y.dl()->dtype.lanes = 4;
        return call();
      },
      "lanes");
  ASSERT_EQ(warm(), DLFUSE_STATUS_OK);
}

TEST_F(RepeatedLayout, AttributesAreSeen) {
  AmaCase c;
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();
  const DLTensor* in[3] = {c.x, c.y, c.bias};
  DLTensor* out[1] = {c.out};
  dlfuse_attr_t attrs[2] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU), attr_f64(DLFUSE_ATTR_MULTIPLIER, 2.0)};
  auto call = [&](int32_t n) { return dlfuse_op_call(op, in, 3, out, 1, attrs, n, nullptr); };
  for (double mul : {2.0, -3.0, 0.5}) {  // new values of a repeated attribute list reach the kernel
    attrs[1].value.f64 = mul;
    ASSERT_EQ(call(2), DLFUSE_STATUS_OK) << last_error();
    for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, mul, true)) << mul;
  }
  ASSERT_EQ(call(1), DLFUSE_STATUS_OK) << last_error();  // multiplier left to its default, 1
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 1.0, true));
  attrs[1].value.f64 = 2.0;
  auto warm = [&] {
    attrs[0] = attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU);
    return call(2);
  };
  expect_refused_like_a_first_call(
      warm,
      [&] {
        attrs[0].value.i64 = DLFUSE_ACT_COUNT;
        return call(2);
      },
      "ACTIVATION");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        attrs[0].type = DLFUSE_ATTR_FLOAT64;
        return call(2);
      },
      "type");
  expect_refused_like_a_first_call(
      warm,
      [&] {
        attrs[0] = attrs[1];
        return call(2);
      },
      "twice");
  expect_refused_like_a_first_call(
      warm, [&] { return call(0); }, "missing");
  expect_refused_like_a_first_call(
      warm, [&] { return dlfuse_op_call(op, in, 3, out, 1, nullptr, 2, nullptr); }, "attrs");
}

TEST_F(RepeatedLayout, OptionalOutputsArePartOfTheLayout) {
  AmaCase c;
  Tensor g({2, 3}), gx({2, 3}), gy({2, 3}), gb({3}), wrong({3, 2});
  g.fill(1.0f);
  DLTensor* grad_x = gx;
  auto call = [&] {
    return dlfuse_add_mul_activation_backward(reg, g, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, grad_x, gy, gb, nullptr);
  };
  auto warm = [&] {
    grad_x = nullptr;
    return call();
  };  // grad_x not wanted
  expect_refused_like_a_first_call(
      warm,
      [&] {
        grad_x = wrong;
        return call();
      },
      "grad_x");
  grad_x = gx;
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();
  expect_refused_like_a_first_call(
      call,
      [&] {
        grad_x = gy;
        return call();
      },
      "overlaps");
}

TEST_F(RepeatedLayout, RandomCallsAgreeWithAFirstCall) {
  // Small random layouts and placements over one arena: each call's outcome on this
  // thread (which called before, often with the same layout) equals a fresh thread's.
  std::mt19937_64 rng(20261123);
  std::vector<double> arena(256);
  char* base = reinterpret_cast<char*>(arena.data());
  int64_t shapes[4][2], strides[4][2];
  DLTensor t[4];
  for (int iter = 0; iter < 400; ++iter) {
    const bool new_layout = iter == 0 || rng() % 4 == 0;
    for (int k = 0; k < 4; ++k) {
      if (new_layout) {
        t[k] = DLTensor{};
        t[k].device = DLDevice{kDLCPU, 0};
        t[k].dtype = rng() % 8 ? f32() : f64();
        t[k].ndim = 2;
        shapes[k][0] = 1 + rng() % 3;
        shapes[k][1] = k == 2 ? 3 : 1 + rng() % 3;
        t[k].shape = shapes[k];
        t[k].strides = nullptr;
        if (rng() % 3 == 0) {
          strides[k][0] = static_cast<int64_t>(rng() % 5);
          strides[k][1] = static_cast<int64_t>(rng() % 3);
          t[k].strides = strides[k];
        }
      }
      // Placement changes on every call: mostly aligned, sometimes not, sometimes shared.
      t[k].data = base + 8 * (rng() % 24);
      t[k].byte_offset = rng() % 6 ? 0 : rng() % 9;
    }
    if (rng() % 5 == 0) t[3] = t[0];  // out aliasing x exactly: in place
    auto call = [&] {
      return dlfuse_add_mul_activation(reg, &t[0], &t[1], &t[2], 1.0, DLFUSE_ACT_RELU, &t[3], nullptr);
    };
    const Outcome here = outcome_of(call);
    const Outcome fresh = on_fresh_thread(call);
    ASSERT_EQ(here, fresh) << "iteration " << iter;
  }
}

}  // namespace
}  // namespace unit

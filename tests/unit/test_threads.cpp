// Threads: concurrent calls through one registry and one op handle; the last error is
// per thread.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "unit_common.h"

namespace unit {
namespace {

constexpr int kThreads = 8;
constexpr int kCallsPerThread = 1000;

// Each thread computes with its own values and checks every result.
void worker(dlfuse_registry_t reg, dlfuse_op_t op, int t, std::atomic<int>* failures, std::atomic<int64_t>* ok_calls) {
  AmaCase c(4, 8, static_cast<float>(t));
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const double mul = 0.5 * t;
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_IDENTITY),
                                 attr_f64(DLFUSE_ATTR_MULTIPLIER, mul)};
  for (int i = 0; i < kCallsPerThread; ++i) {
    dlfuse_status_t s;
    const bool relu = (i % 2) == 1;
    c.out.fill(-777.0f);
    if (relu)
      s = dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, mul, DLFUSE_ACT_RELU, c.out, nullptr);
    else
      s = dlfuse_op_call(op, in, 3, out, 1, attrs, 2, nullptr);
    if (s != DLFUSE_STATUS_OK) {
      failures->fetch_add(1);
      continue;
    }
    ok_calls->fetch_add(1);
    for (int64_t k = 0; k < 32; ++k)
      if (c.out.f()[k] != c.expect(k, mul, relu)) {
        failures->fetch_add(1);
        break;
      }
  }
}

TEST(Threads, ManyThreadsShareARegistryAndAnOpHandle) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  Probe probe("unit_echo");
  ASSERT_TRUE(probe.loaded());
  probe.reset();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();

  std::atomic<int> failures{0};
  std::atomic<int64_t> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, reg.get(), op, t, &failures, &ok);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ok.load(), int64_t{kThreads} * kCallsPerThread);
  EXPECT_EQ(probe.calls(), int64_t{kThreads} * kCallsPerThread);
}

TEST(Threads, CallsWhileLoadingAndPreferring) {
  // Loading is serialized; calls do not lock. Calls racing with a load and preference
  // changes must all succeed and land on one of the two (equivalent) plugins.
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK);
  Probe echo("unit_echo");
  echo.reset();
  // echo2/echo3 may already be mapped (and have counts) from an earlier test.
  int64_t before23 = Probe("unit_echo2").calls() + Probe("unit_echo3").calls();

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int64_t> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      AmaCase c(2, 4, static_cast<float>(t));
      const DLTensor* in[] = {c.x, c.y, c.bias};
      DLTensor* out[] = {c.out};
      const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
      for (int i = 0; i < 20000 && !(stop.load() && i > 200); ++i) {
        if (dlfuse_op_call(op, in, 3, out, 1, attrs, 1, nullptr) != DLFUSE_STATUS_OK) {
          failures.fetch_add(1);
          continue;
        }
        ok.fetch_add(1);
        if (c.out.f()[5] != c.expect(5, 1.0, true)) failures.fetch_add(1);
      }
    });
  EXPECT_EQ(reg.load("unit_echo2"), DLFUSE_STATUS_OK) << last_error();
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(dlfuse_registry_prefer(reg, nullptr, i % 2 ? "unit_echo2" : "unit_echo"), DLFUSE_STATUS_OK);
    std::this_thread::yield();
  }
  EXPECT_EQ(reg.load("unit_echo3"), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(dlfuse_registry_prefer(reg, nullptr, nullptr), DLFUSE_STATUS_OK);
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  Probe echo2("unit_echo2"), echo3("unit_echo3");
  EXPECT_EQ(echo.calls() + echo2.calls() + echo3.calls() - before23, ok.load());
}

TEST(LastError, IsPerThread) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();

  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stage >= s; });
  };
  auto advance = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++stage;
    cv.notify_all();
  };

  std::string a_before, a_after, b_initial, b_msg;
  std::thread a([&] {
    dlfuse_op_t op = nullptr;
    EXPECT_EQ(dlfuse_op_get(reg, "op_of_thread_a", &op), DLFUSE_STATUS_NOT_FOUND);
    a_before = last_error();
    advance();  // 1: A has failed
    wait_for(2);
    a_after = last_error();
  });
  std::thread b([&] {
    wait_for(1);
    b_initial = last_error();
    dlfuse_op_t op = nullptr;
    EXPECT_EQ(dlfuse_op_get(reg, "op_of_thread_b", &op), DLFUSE_STATUS_NOT_FOUND);
    b_msg = last_error();
    advance();  // 2: B has failed
  });
  a.join();
  b.join();
  EXPECT_MSG_HAS(a_before, "op_of_thread_a");
  EXPECT_EQ(a_after, a_before) << "thread B's failure changed thread A's last error";
  EXPECT_EQ(b_initial, "") << "a new thread starts with an empty last error";
  EXPECT_MSG_HAS(b_msg, "op_of_thread_b");
  EXPECT_EQ(b_msg.find("op_of_thread_a"), std::string::npos);
}

TEST(LastError, SuccessLeavesItAsItWas) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, "no_such_op_for_success_test", &op), DLFUSE_STATUS_NOT_FOUND);
  const std::string before = last_error();
  AmaCase c;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK);
  int32_t n = 0;
  ASSERT_EQ(dlfuse_registry_plugin_count(reg, &n), DLFUSE_STATUS_OK);
  EXPECT_EQ(last_error(), before);
}

TEST(LastError, LongMessagesAreNotTruncatedToNothing) {
  // A very long op name: the message still names it (at least its start).
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  const std::string name = "long_op_" + std::string(5000, 'q');
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, name.c_str(), &op), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "long_op_qqqq");
}

}  // namespace
}  // namespace unit

// Timing of the oneDNN plugin against its floors and raw oneDNN, all in one process with
// the items interleaved round by round (so a noisy, shared machine slows all of them
// alike), medians printed. Not a test: it asserts nothing.
//
//   onednn_timing /abs/path/libdlfuse_onednn.so [--pointwise MxN] [--matmul MxKxN] [--rounds R] [--only TEXT]
//
// Rows: add_mul_activation (relu, multiplier 0.5, row bias) forward, backward (x, y, bias)
// and backward from out (also without grad_bias: the cost of its reduction) in float32
// and bfloat16, each with its byte floor (the bytes it must move over the copy bandwidth
// measured in the same rounds: two threads copying halves of an M x N float32 array,
// bytes read + written); the raw oneDNN binary primitive of the forward with oneDNN's
// relu (float32, bfloat16); matmul_add_relu forward against the raw oneDNN matmul with the
// plugin's NaN-keeping relu post-ops (elu alpha 0, linear 1 0), float32 and bfloat16.
#include <dlfuse/dlfuse.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

struct Tensor {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  DLTensor t{};
  Tensor(std::vector<int64_t> s, bool bf16, unsigned seed) : shape(std::move(s)) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    bytes.resize(n * (bf16 ? 2 : 4) + 64);
    // 64-byte aligned data, as a framework's allocator gives.
    const size_t pad = (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
    t.data = bytes.data() + pad;
    unsigned x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      const float f = float(int(x >> 9) % 2001 - 1000) / 1000.f;
      if (bf16) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t h = uint16_t(u >> 16);
        std::memcpy(static_cast<uint8_t*>(t.data) + 2 * i, &h, 2);
      } else {
        std::memcpy(static_cast<uint8_t*>(t.data) + 4 * i, &f, 4);
      }
    }
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = bf16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 32, 1};
    t.shape = shape.data();
  }
};

struct Item {
  std::string name;
  double floor_bytes;  // 0: no floor
  std::function<void()> run;
  std::vector<double> ms = {}, cpu_ms = {};  // wall time; CPU time of all the process's threads
};

// CPU time of the whole process (OpenMP workers included; with OMP_WAIT_POLICY=passive an
// idle worker sleeps and costs none): on a machine shared with other jobs, time spent
// descheduled does not count, so ratios of CPU times stay meaningful where wall times
// do not.
double cpu_now_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void ok(dlfuse_status_t st, const char* what) {
  if (st != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "%s: %s\n", what, dlfuse_last_error());
    std::exit(1);
  }
}

std::vector<int64_t> dims(const char* s) {
  std::vector<int64_t> d;
  for (const char* p = s; *p;) {
    d.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == 'x')
      ++p;
    else if (*p)
      break;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] != '/') {
    std::fprintf(stderr,
                 "usage: %s /abs/libdlfuse_onednn.so [--pointwise MxN] [--matmul MxKxN] [--rounds R] [--only TEXT]\n",
                 argv[0]);
    return 2;
  }
  std::vector<int64_t> pw{16384, 8192}, mm{4096, 1024, 1024};
  int rounds = 15;
  std::string only;  // run the items whose name contains this (the copy always runs)
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--pointwise"))
      pw = dims(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--matmul"))
      mm = dims(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds"))
      rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only"))
      only = argv[i + 1];
  }
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, argv[1]};
  dlfuse_registry_t reg = nullptr;
  ok(dlfuse_registry_create(&opt, &reg), "registry");
  std::vector<Item> items;
  std::vector<std::unique_ptr<Tensor>> keep;
  auto tensor = [&](std::vector<int64_t> s, bool bf16, unsigned seed) {
    keep.push_back(std::make_unique<Tensor>(std::move(s), bf16, seed));
    return &keep.back()->t;
  };

  const int64_t M = pw[0], N = pw[1];
  const double elems = double(M) * double(N);
  // The copy floor: 2 threads, each copying its half.
  DLTensor* csrc = tensor({M, N}, false, 90);
  DLTensor* cdst = tensor({M, N}, false, 91);
  items.push_back({"copy M x N float32 (bandwidth)", 0, [&] {
                     const size_t half = size_t(elems) * 2;
                     std::thread t([&] {
                       std::memcpy(static_cast<char*>(cdst->data) + half, static_cast<char*>(csrc->data) + half, half);
                     });
                     std::memcpy(cdst->data, csrc->data, half);
                     t.join();
                   }});
  for (bool bf : {false, true}) {
    const double es = bf ? 2 : 4;
    const char* dn = bf ? "bfloat16" : "float32";
    DLTensor *x = tensor({M, N}, bf, 1), *y = tensor({M, N}, bf, 2), *b = tensor({N}, bf, 3),
             *o = tensor({M, N}, bf, 4);
    DLTensor *g = tensor({M, N}, bf, 5), *gx = tensor({M, N}, bf, 6), *gy = tensor({M, N}, bf, 7),
             *gb = tensor({N}, bf, 8);
    items.push_back({std::string("add_mul fwd ") + dn, 4 * es * elems,
                     [=] { ok(dlfuse_add_mul_activation(reg, x, y, b, 0.5, DLFUSE_ACT_RELU, o, nullptr), "fwd"); }});
    items.push_back(
        {std::string("add_mul bwd x,y,bias ") + dn, 5 * es * elems, [=] {
           ok(dlfuse_add_mul_activation_backward(reg, g, x, y, b, 0.5, DLFUSE_ACT_RELU, gx, gy, gb, nullptr), "bwd");
         }});
    items.push_back(
        {std::string("add_mul bwd from out ") + dn, 4 * es * elems, [=] {
           ok(dlfuse_add_mul_activation_backward_from_out(reg, g, o, 0.5, DLFUSE_ACT_RELU, gx, gy, gb, nullptr),
              "bwd from out");
         }});
    items.push_back(
        {std::string("add_mul bwd from out, no grad_bias ") + dn, 4 * es * elems, [=] {
           ok(dlfuse_add_mul_activation_backward_from_out(reg, g, o, 0.5, DLFUSE_ACT_RELU, gx, gy, nullptr, nullptr),
              "bwd from out");
         }});
  }

  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  std::vector<std::unique_ptr<primitive>> prims;
  std::vector<std::unordered_map<int, memory>> pargs;
  auto add_raw = [&](std::string name, primitive p, std::unordered_map<int, memory> args) {
    prims.push_back(std::make_unique<primitive>(p));
    pargs.push_back(std::move(args));
    primitive* pp = prims.back().get();
    auto* ap = &pargs.back();
    items.push_back({std::move(name), 0, [=, &strm] {
                       pp->execute(strm, *ap);
                       strm.wait();
                     }});
  };
  pargs.reserve(8);
  for (bool bf : {false, true}) {  // relu as oneDNN's own post-op, which maps NaN to 0
    const auto dt = bf ? memory::data_type::bf16 : memory::data_type::f32;
    DLTensor *x = tensor({M, N}, bf, 1), *y = tensor({M, N}, bf, 2), *b = tensor({N}, bf, 3),
             *o = tensor({M, N}, bf, 4);
    memory::desc md({M, N}, dt, memory::format_tag::ab);
    memory::desc bmd({1, N}, dt, memory::format_tag::ab);
    primitive_attr attr;
    attr.set_scales(DNNL_ARG_SRC_1, 0, {0.5f});
    post_ops po;
    po.append_binary(algorithm::binary_add, bmd);
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
    binary::primitive_desc pd(binary::desc(algorithm::binary_add, md, md, md), attr, eng);
    std::printf("raw binary %s: %s\n", bf ? "bfloat16" : "float32", pd.impl_info_str());
    add_raw(std::string("raw oneDNN binary fwd ") + (bf ? "bfloat16" : "float32"), binary(pd),
            {{DNNL_ARG_SRC_0, memory(md, eng, x->data)},
             {DNNL_ARG_SRC_1, memory(md, eng, y->data)},
             {DNNL_ARG_DST, memory(md, eng, o->data)},
             {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(bmd, eng, b->data)}});
  }
  const int64_t MM = mm[0], KK = mm[1], NN = mm[2];
  for (bool bf : {false, true}) {
    const char* dn = bf ? "bfloat16" : "float32";
    DLTensor *a = tensor({MM, KK}, bf, 11), *w = tensor({KK, NN}, bf, 12), *b = tensor({NN}, bf, 13),
             *o = tensor({MM, NN}, bf, 14), *ro = tensor({MM, NN}, bf, 15);
    items.push_back({std::string("matmul_add_relu fwd ") + dn, 0,
                     [=] { ok(dlfuse_matmul_add_relu(reg, a, w, b, o, 0, nullptr), "matmul"); }});
    const auto dt = bf ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc amd({MM, KK}, dt, memory::format_tag::ab), wmd({KK, NN}, dt, memory::format_tag::ab),
        bmd({1, NN}, dt, memory::format_tag::ab), omd({MM, NN}, dt, memory::format_tag::ab);
    post_ops po;
    po.append_eltwise(1.f, algorithm::eltwise_elu, 0.f, 0.f);
    po.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, 0.f);
    primitive_attr attr;
    attr.set_post_ops(po);
    matmul::primitive_desc pd(matmul::desc(amd, wmd, bmd, omd), attr, eng);
    std::printf("raw matmul %s: %s\n", dn, pd.impl_info_str());
    add_raw(std::string("raw oneDNN matmul nankeep ") + dn, matmul(pd),
            {{DNNL_ARG_SRC, memory(amd, eng, a->data)},
             {DNNL_ARG_WEIGHTS, memory(wmd, eng, w->data)},
             {DNNL_ARG_BIAS, memory(bmd, eng, b->data)},
             {DNNL_ARG_DST, memory(omd, eng, ro->data)}});
  }

  if (!only.empty())
    items.erase(std::remove_if(items.begin() + 1, items.end(),
                               [&](const Item& it) { return it.name.find(only) == std::string::npos; }),
                items.end());
  for (Item& it : items) it.run();  // warm-up: page faults, primitive builds
  for (int r = 0; r < rounds; ++r)
    for (Item& it : items) {
      const double c0 = cpu_now_ms();
      const auto t0 = std::chrono::steady_clock::now();
      it.run();
      it.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      it.cpu_ms.push_back(cpu_now_ms() - c0);
    }
  const double copy_ms = median(items[0].ms), copy_cpu = median(items[0].cpu_ms);
  const double bw = 2 * 4 * elems / (copy_ms * 1e-3);       // bytes read + written per second
  const double cpu_bw = 2 * 4 * elems / (copy_cpu * 1e-3);  // the same per CPU second
  std::printf("pointwise %lldx%lld, matmul %lldx%lldx%lld, %d rounds, copy bandwidth %.1f GB/s\n", (long long)M,
              (long long)N, (long long)MM, (long long)KK, (long long)NN, rounds, bw / 1e9);
  std::printf("%-44s %10s %10s %8s %10s %8s\n", "item", "median ms", "floor ms", "x floor", "CPU ms", "x floor");
  for (const Item& it : items) {
    const double med = median(it.ms), cpu = median(it.cpu_ms);
    if (it.floor_bytes > 0) {
      const double fl = it.floor_bytes / bw * 1e3, cfl = it.floor_bytes / cpu_bw * 1e3;
      std::printf("%-44s %10.2f %10.2f %8.2f %10.2f %8.2f\n", it.name.c_str(), med, fl, med / fl, cpu, cpu / cfl);
    } else {
      std::printf("%-44s %10.2f %10s %8s %10.2f\n", it.name.c_str(), med, "", "", cpu);
    }
  }
  dlfuse_registry_destroy(reg);
  return 0;
}

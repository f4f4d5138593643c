// dlfuse: the command-line face of libdlfuse.
#include <cstring>
#include <exception>
#include <iostream>

#include "cli.h"
#include <dlfuse/types.h>

namespace dlfuse_cli {

const char* const kUsage =
    "usage: dlfuse <command> [options]\n"
    "\n"
    "commands:\n"
    "  list [--plugin PATH]...          every discovered plugin, its devices and kernels\n"
    "  run OP|all [options]             run ops on random data, check against the float64\n"
    "                                   reference, time them\n"
    "      --shape M,K,N | M,N  --batch B  --dtype f32|f64|f16|bf16  --plugin NAME|PATH\n"
    "      --act relu|identity|sigmoid|tanh|gelu_erf|gelu_tanh|silu  --multiplier X\n"
    "      --device-type cpu|cuda|opencl|webgpu  --device-id I  --repeat N  --seed S\n"
    "      --prefer NAME[,NAME]...      dispatch to these plugins first (ahead of\n"
    "                                   DLFUSE_PREFER; not with --plugin)\n"
    "      `run all` without --plugin runs every available plugin, device and dtype;\n"
    "      with --prefer or DLFUSE_PREFER only what dispatch picks per (op, device\n"
    "      type, dtype): the preferred plugin's kernels where it has them\n"
    "  conform PLUGIN.so [options]       the conformance suite for one plugin file\n"
    "      --dtype D  --op OP  --case TEXT  --exclude TEXT[,TEXT]  --device-id I  --verbose  --no-bad-inputs\n"
    "      --seed S|random  --sweep N  --repeat N  --threads N  --no-stale-memory\n"
    "      --nondeterministic OP[,OP...]|all  (docs/plugin-guide.md, section 7)\n"
    "      --large                      also the cases of 2^26 elements or more (GPU plugins)\n"
    "      --grid                       also a grid of GEMM shapes with rows not 16-byte aligned\n"
    "                                   (GPU plugins' padded-copy paths; minutes on a CPU)\n"
    "      --reference REF.so           a plugin whose float64 CPU kernels are the reference for\n"
    "                                   the plugin's own ops (declared ops have no other)\n"
    "      --schema-checks              also the checks derived from schemas on the core ops\n"
    "                                   (the plugin's own ops always get them)\n"
    "  version                          versions of the tool and the ABI\n"
    "  --help                           this text\n"
    "\n"
    "ops (dlfuse/ops.def; plugins may declare more, which `dlfuse list` shows):\n"
// One "  <name>\n" per entry of the op table.
#define DLFUSE_OP(op, since) "  " #op "\n"
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
#include <dlfuse/ops.def>
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
    ;

namespace {

int cmd_version() {
  uint32_t major = 0, minor = 0;
  dlfuse_abi_version(&major, &minor);
  std::cout << "dlfuse " << DLFUSE_VERSION_STRING << " (libdlfuse ABI " << major << "." << minor
            << ", built against ABI " << DLFUSE_ABI_MAJOR << "." << DLFUSE_ABI_MINOR << ")\n";
  return 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "version" || cmd == "--version") {
    parse_args(argc, argv, 2, {}, {});
    return cmd_version();
  }
  if (cmd == "list") return cmd_list(parse_args(argc, argv, 2, {"--plugin"}, {}));
  if (cmd == "run")
    return cmd_run(parse_args(argc, argv, 2,
                              {"--shape", "--batch", "--dtype", "--plugin", "--act", "--multiplier", "--device-type",
                               "--device-id", "--repeat", "--seed", "--prefer"},
                              {}));
  if (cmd == "conform") return cmd_conform(parse_args(argc, argv, 2, kConformValued, kConformFlags));
  throw UsageError("unknown command '" + cmd + "'");
}

}  // namespace
}  // namespace dlfuse_cli

int main(int argc, char** argv) {
  try {
    return dlfuse_cli::dispatch(argc, argv);
  } catch (const dlfuse_cli::UsageError& e) {
    std::cerr << "dlfuse: " << e.what() << "\n\n" << dlfuse_cli::kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dlfuse: internal error: " << e.what() << "\n";
    return 3;
  }
}

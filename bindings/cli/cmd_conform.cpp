// dlfuse conform PLUGIN.so: the conformance suite for one plugin file.
#include <cctype>
#include <iostream>
#include <random>
#include <sstream>

#include "cli.h"
#include "dtypes.h"
#include "mlp_cases.h"
#include "op_case.h"
#include "runner.h"

namespace dlfuse_cli {

const std::set<std::string> kConformValued = {"--dtype",    "--op",    "--case",   "--exclude", "--device-id",
                                              "--seed",     "--sweep", "--repeat", "--threads", "--nondeterministic",
                                              "--reference"};
const std::set<std::string> kConformFlags = {"--verbose", "--no-bad-inputs", "--no-stale-memory",
                                             "--large",   "--grid",          "--schema-checks"};

namespace {

bool valid_op_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

int count_option(const Args& args, const std::string& opt, int fallback, int min) {
  const long long v = args.get_int(opt, fallback);
  if (v < min || v > 1000000) throw UsageError(opt + " wants an integer >= " + std::to_string(min));
  return int(v);
}

}  // namespace

int cmd_conform(const Args& args) {
  namespace dc = dlfuse_conformance;
  if (args.positional.size() != 1) throw UsageError("conform takes exactly one plugin file");
  dc::ConformOptions opts;
  opts.dtype = args.get("--dtype", "");
  DLDataType dt;
  if (!opts.dtype.empty() && !dc::parse_dtype(opts.dtype, &dt)) throw UsageError("unknown dtype '" + opts.dtype + "'");
  // Any op name: a plugin's own ops are known only once it is loaded (the table then says
  // when no kernel matched).
  opts.op = args.get("--op", "");
  if (!opts.op.empty() && !valid_op_name(opts.op))
    throw UsageError("--op: '" + opts.op + "' is not an op name ([A-Za-z0-9_], 1-64)");
  opts.case_filter = args.get("--case", "");
  opts.case_exclude = args.get("--exclude", "");
  opts.device_id = int(args.get_int("--device-id", -1));
  // "random": a fresh seed, printed in the table's header so that a failure can be rerun.
  if (args.get("--seed", "") == "random")
    opts.seed = (uint64_t(std::random_device{}()) << 32 | std::random_device{}()) % 1000000000000ull;
  else
    opts.seed = uint64_t(args.get_int("--seed", (long long)opts.seed));
  opts.sweep = count_option(args, "--sweep", opts.sweep, 0);
  opts.repeats = count_option(args, "--repeat", opts.repeats, 1);
  opts.threads = count_option(args, "--threads", opts.threads, 0);
  opts.stale = !args.has("--no-stale-memory");
  std::stringstream ops(args.get("--nondeterministic", ""));
  for (std::string item; std::getline(ops, item, ',');) {
    if (item != "all" && !valid_op_name(item)) throw UsageError("--nondeterministic: '" + item + "' is not an op name");
    opts.nondeterministic.insert(item);
  }
  opts.verbose = args.has("--verbose");
  opts.bad_inputs = !args.has("--no-bad-inputs");
  opts.large = args.has("--large");
  opts.grid = args.has("--grid");
  opts.reference = args.get("--reference", "");
  opts.schema_checks = args.has("--schema-checks");
  const dc::ConformSummary s = dc::run_conformance(args.positional[0], opts, std::cout);
  return s.failed == 0 ? 0 : 1;
}

}  // namespace dlfuse_cli

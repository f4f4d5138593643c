// dlfuse conform PLUGIN.so: the conformance suite for one plugin file.
#include <iostream>

#include "cli.h"
#include "dtypes.h"
#include "op_case.h"
#include "runner.h"

namespace dlfuse_cli {

int cmd_conform(const Args& args) {
  if (args.positional.size() != 1) throw UsageError("conform takes exactly one plugin file");
  dlfuse_conformance::ConformOptions opts;
  opts.dtype = args.get("--dtype", "");
  DLDataType dt;
  if (!opts.dtype.empty() && !dlfuse_conformance::parse_dtype(opts.dtype, &dt))
    throw UsageError("unknown dtype '" + opts.dtype + "'");
  opts.op = args.get("--op", "");
  dlfuse_conformance::OpKind op;
  if (!opts.op.empty() && !dlfuse_conformance::parse_op(opts.op, &op))
    throw UsageError("unknown op '" + opts.op + "'");
  opts.device_id = int(args.get_int("--device-id", -1));
  opts.seed = uint64_t(args.get_int("--seed", (long long)opts.seed));
  opts.verbose = args.has("--verbose");
  opts.bad_inputs = !args.has("--no-bad-inputs");
  const dlfuse_conformance::ConformSummary s =
      dlfuse_conformance::run_conformance(args.positional[0], opts, std::cout);
  return s.failed == 0 ? 0 : 1;
}

}  // namespace dlfuse_cli

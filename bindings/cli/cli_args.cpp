#include <cstdlib>

#include "cli.h"

namespace dlfuse_cli {

std::string Args::get(const std::string& opt, const std::string& fallback) const {
  auto it = values.find(opt);
  return it == values.end() ? fallback : it->second.back();
}

long long Args::get_int(const std::string& opt, long long fallback) const {
  if (!values.count(opt)) return fallback;
  const std::string s = get(opt, "");
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) throw UsageError(opt + " wants an integer, got '" + s + "'");
  return v;
}

double Args::get_double(const std::string& opt, double fallback) const {
  if (!values.count(opt)) return fallback;
  const std::string s = get(opt, "");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw UsageError(opt + " wants a number, got '" + s + "'");
  return v;
}

Args parse_args(int argc, char** argv, int start, const std::set<std::string>& valued,
                const std::set<std::string>& flags) {
  Args a;
  for (int i = start; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      a.positional.push_back(arg);
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (flags.count(arg) && !inline_value) {
      a.flags.insert(arg);
    } else if (valued.count(arg)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(arg + " needs a value");
        value = argv[++i];
      }
      a.values[arg].push_back(value);
    } else {
      throw UsageError("unknown option " + arg);
    }
  }
  return a;
}

std::vector<long long> parse_int_list(const std::string& s, const std::string& what) {
  std::vector<long long> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0) throw UsageError(what + ": '" + s + "' is not a list of sizes");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace dlfuse_cli

// The pieces of the `dlfuse` command shared by its subcommands.
#ifndef DLFUSE_CLI_CLI_H_
#define DLFUSE_CLI_CLI_H_

#include <dlfuse/dlfuse.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlfuse_cli {

// A command line the CLI does not understand: main prints the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // --opt VALUE (repeatable)
  std::set<std::string> flags;                             // --flag
  bool has(const std::string& opt) const { return values.count(opt) || flags.count(opt); }
  std::string get(const std::string& opt, const std::string& fallback) const;
  long long get_int(const std::string& opt, long long fallback) const;
  double get_double(const std::string& opt, double fallback) const;
};

// Parses argv[start..]: `valued` options take a value (--opt V or --opt=V), `flags` none.
Args parse_args(int argc, char** argv, int start, const std::set<std::string>& valued,
                const std::set<std::string>& flags);
std::vector<long long> parse_int_list(const std::string& s, const std::string& what);

// Registry helpers.
std::string device_type_name(int32_t device_type);
bool parse_device_type(const std::string& s, int32_t* device_type);
dlfuse_plugin_info_t plugin_info(dlfuse_registry_t reg, int32_t index);  // name "" on failure
// A plugin by name, or by file (loaded if need be). -1 with *err if there is none.
int32_t find_plugin(dlfuse_registry_t reg, const std::string& name_or_path, std::string* err);
std::string last_error(dlfuse_status_t st);

extern const char* const kUsage;

int cmd_list(const Args& args);
int cmd_run(const Args& args);
int cmd_conform(const Args& args);
extern const std::set<std::string> kConformValued, kConformFlags;  // conform's options

}  // namespace dlfuse_cli

#endif

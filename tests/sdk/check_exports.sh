#!/usr/bin/env bash
# check_exports.sh PLUGIN.so...: each plugin's only defined dynamic symbol must be
# dlfuse_plugin_v1 (docs/plugin-guide.md). Anything else (a weak std:: template instance,
# a static library's symbol) could be bound by the dynamic linker to another plugin's copy.
set -euo pipefail
[ $# -gt 0 ] || { echo "check_exports.sh: no plugin given"; exit 1; }
bad=0
for so in "$@"; do
  syms=$(nm -D --defined-only "$so" | awk '{print $3}')
  if [ "$syms" = dlfuse_plugin_v1 ]; then
    echo "ok: $so exports dlfuse_plugin_v1 only"
  else
    echo "FAIL: $so: expected dlfuse_plugin_v1 alone, got:"
    nm -D --defined-only "$so" | c++filt | sed 's/^/    /'
    bad=1
  fi
done
exit $bad

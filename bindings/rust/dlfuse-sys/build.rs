// Links libdlfuse when the `link` feature is on. The library is found through
// DLFUSE_LIB_DIR (the folder holding libdlfuse.so, e.g. build/cpu/lib or <prefix>/lib);
// without it the system linker paths are searched.
use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=DLFUSE_LIB_DIR");
    if env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }
    if let Some(dir) = env::var_os("DLFUSE_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=dlfuse");
}

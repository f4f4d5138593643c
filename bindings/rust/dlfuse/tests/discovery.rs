//! The Rust plugin loads beside the C++ plugins: through $DLFUSE_PLUGIN_PATH with default
//! discovery (this crate and the `dlfuse list` CLI), and preferences pick between them.
//! One test per binary: it sets an environment variable.
mod common;

use std::process::Command;

use common::*;
use dlfuse::{Device, Discovery, Registry, FLOAT32};

fn cli() -> std::path::PathBuf {
    match std::env::var_os("DLFUSE_CLI") {
        Some(p) => p.into(),
        None => std::path::PathBuf::from(std::env::var_os("DLFUSE_LIB_DIR").expect("DLFUSE_LIB_DIR")).join("../bin/dlfuse"),
    }
}

#[test]
fn rust_plugin_beside_the_cpp_plugins() {
    let rust = rust_plugin();
    std::env::set_var("DLFUSE_PLUGIN_PATH", &rust);
    let reg = Registry::with_options(Discovery::DEFAULT, &[] as &[&str]).unwrap();
    let plugins = reg.plugins().unwrap();
    let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
    for want in ["rust", "onednn", "testref"] {
        let p = plugins.iter().find(|p| p.name == want).unwrap_or_else(|| panic!("{} not loaded: {:?}", want, names));
        assert!(p.available, "{}: {}", want, p.reason);
    }
    let r = plugins.iter().find(|p| p.name == "rust").unwrap();
    assert_eq!(r.path, rust);
    assert_eq!((r.abi_major, r.abi_minor), dlfuse::abi_version());
    assert_eq!(r.device_type, Device::CPU.device_type);
    assert_eq!(r.device_count, 1);
    let mut ops: Vec<&str> = r.kernels.iter().map(|k| k.op.as_str()).collect();
    ops.sort_unstable();
    assert_eq!(ops, ["add_mul_activation", "add_mul_activation_backward", "matmul_add_relu", "matmul_add_relu_backward"]);
    assert!(r.kernels.iter().all(|k| k.dtypes == [FLOAT32] && k.priority == 0));

    // Dispatch: onednn (priority 100) wins until the Rust plugin is preferred, for one op
    // or for all; clearing the preferences restores the default.
    let by = |op: &str| reg.plugin(reg.resolve(op, Device::CPU.device_type, FLOAT32).unwrap()).unwrap().name;
    assert_eq!(by("matmul_add_relu"), "onednn");
    reg.prefer(Some("matmul_add_relu"), Some("rust")).unwrap();
    assert_eq!(by("matmul_add_relu"), "rust");
    assert_eq!(by("add_mul_activation"), "onednn");
    reg.prefer(None, Some("testref")).unwrap();
    assert_eq!(by("add_mul_activation"), "testref");
    assert_eq!(by("matmul_add_relu"), "testref");
    reg.prefer(None, None).unwrap();
    assert_eq!(by("matmul_add_relu"), "onednn");

    // The CLI lists it the same way.
    let out = Command::new(cli()).arg("list").env("DLFUSE_PLUGIN_PATH", &rust).output().expect("run dlfuse list");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["rust", "onednn", "testref"] {
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(want)).unwrap_or_else(|| panic!("{} not listed:\n{}", want, text));
        assert!(line.contains("available"), "{}", line);
    }
    assert!(text.contains(&rust.display().to_string()), "{}", text);
}

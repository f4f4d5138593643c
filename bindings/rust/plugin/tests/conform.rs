//! The plugin against the conformance suite (`dlfuse conform`), a build with a wrong
//! gradient (feature `wrong-grad`) failing it for the right reason, and the exported
//! symbols. The CLI is $DLFUSE_CLI, else $DLFUSE_LIB_DIR/../bin/dlfuse.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cli() -> PathBuf {
    match std::env::var_os("DLFUSE_CLI") {
        Some(p) => p.into(),
        None => PathBuf::from(std::env::var_os("DLFUSE_LIB_DIR").expect("set DLFUSE_CLI or DLFUSE_LIB_DIR")).join("../bin/dlfuse"),
    }
}

/// target/<profile>, where cargo put this plugin's cdylib.
fn profile_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf()
}

/// The cdylib of this very build: cargo leaves it beside the test executables.
fn plugin() -> PathBuf {
    let p = profile_dir().join("deps/libdlfuse_rust.so");
    assert!(p.exists(), "{} not built", p.display());
    p
}

fn conform(plugin: &Path) -> (Output, String) {
    let out = Command::new(cli()).arg("conform").arg(plugin).output().expect("run dlfuse conform");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

#[test]
fn passes_conformance() {
    let (out, text) = conform(&plugin());
    assert!(out.status.success(), "conformance failed:\n{}\n{}", text, String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("# plugin rust "), "{}", text);
    let summary = text.lines().last().unwrap();
    let passed: u32 = summary.split_whitespace().next().unwrap().parse().unwrap();
    assert!(summary.ends_with(" 0 failed") && passed > 150, "{}", summary);
    for op in ["matmul_add_relu ", "matmul_add_relu_backward ", "add_mul_activation ", "add_mul_activation_backward "] {
        assert!(text.lines().any(|l| l.starts_with("PASS") && l.contains(op)), "no {} case ran", op);
    }
}

/// Builds the `wrong-grad` variant (grad_y of add_mul_activation_backward loses the
/// multiplier) in its own target folder and checks that conformance fails on exactly that.
#[test]
fn wrong_gradient_fails_conformance() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = profile_dir().parent().unwrap().join("wrong-grad");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let status = Command::new(cargo)
        .args(["build", "--release", "--offline", "--features", "wrong-grad", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("run cargo");
    assert!(status.success());
    let (out, text) = conform(&target.join("release/libdlfuse_rust.so"));
    assert_eq!(out.status.code(), Some(1), "{}", text);
    assert!(text.contains("# plugin rust_wrong_grad "), "{}", text);
    let fails: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(!fails.is_empty());
    for l in &fails {
        assert!(l.contains("add_mul_activation_backward"), "unexpected failure: {}", l);
    }
    assert!(text.contains("grad_y["), "{}", text);
    // The forward ops and the cases with multiplier 1 still pass.
    assert!(text.lines().any(|l| l.starts_with("PASS") && l.contains("matmul_add_relu_backward")));
    assert!(text.lines().any(|l| l.starts_with("PASS") && l.contains("mult_one")));
}

/// Only the entry symbol is exported (nm from binutils).
#[test]
fn exports_only_the_entry_symbol() {
    let out = match Command::new("nm").args(["-D", "--defined-only"]).arg(plugin()).output() {
        Ok(o) => o,
        Err(e) => panic!("nm (binutils) is needed for this check: {}", e),
    };
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    assert_eq!(names, ["dlfuse_plugin_v1"]);
}

/// A panic inside a kernel becomes DLFUSE_STATUS_INTERNAL with its message: called here
/// directly, with arguments that make the kernel panic (a K past a's storage is not
/// checked by the plugin, which trusts the registry; an index out of a Vec is).
#[test]
fn kernel_panics_do_not_cross_the_boundary() {
    use dlfuse_sys::*;
    let entry = dlfuse_rust::dlfuse_plugin_v1();
    // SAFETY: the descriptor is a static of this crate.
    let plugin = unsafe { &*entry };
    let mut kernels: *const dlfuse_kernel_t = std::ptr::null();
    let mut n = 0i32;
    let mut err = [0 as std::os::raw::c_char; 256];
    // SAFETY: valid out-pointers and buffer.
    let st = unsafe { plugin.get_kernels.unwrap()(std::ptr::null_mut(), &mut kernels, &mut n, err.as_mut_ptr(), err.len()) };
    assert_eq!((st, n), (DLFUSE_STATUS_OK, 4));
    // add_mul_activation_backward with a bias of more dims than grad_out: the registry
    // would refuse it; the plugin's broadcast helper asserts, and the assert must not unwind into C.
    // SAFETY: n entries.
    let k = unsafe { std::slice::from_raw_parts(kernels, 4) }
        .iter()
        .find(|k| unsafe { std::ffi::CStr::from_ptr(k.op) }.to_bytes() == b"add_mul_activation_backward")
        .unwrap();
    let mut data = [0.0f32; 4];
    let mut s2 = [2i64, 2];
    let mut s3 = [1i64, 2, 2];
    let dtype = DLDataType { code: kDLFloat, bits: 32, lanes: 1 };
    let dev = DLDevice { device_type: kDLCPU, device_id: 0 };
    let mut t = |shape: &mut [i64]| DLTensor {
        data: data.as_mut_ptr() as *mut _,
        device: dev,
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let (g, x, bias) = (t(&mut s2), t(&mut s2), t(&mut s3));
    let mut gx = [0.0f32; 4];
    let mut gxt = g;
    gxt.data = gx.as_mut_ptr() as *mut _;
    let inputs = [&g as *const DLTensor, &x, &x, &bias];
    let outputs = [&mut gxt as *mut DLTensor, std::ptr::null_mut(), std::ptr::null_mut()];
    let attrs = [dlfuse_attr_t { key: DLFUSE_ATTR_ACTIVATION, type_: DLFUSE_ATTR_INT64, value: dlfuse_attr_value_t { i64_: 0 } }];
    let args = dlfuse_kernel_args_t {
        struct_size: std::mem::size_of::<dlfuse_kernel_args_t>(),
        op: k.op,
        inputs: inputs.as_ptr(),
        num_inputs: 4,
        outputs: outputs.as_ptr(),
        num_outputs: 3,
        attrs: attrs.as_ptr(),
        num_attrs: 1,
        stream: std::ptr::null_mut(),
        err: err.as_mut_ptr(),
        err_size: err.len(),
    };
    // SAFETY: every pointer in args is alive for the call.
    let st = unsafe { k.fn_.unwrap()(std::ptr::null_mut(), std::ptr::null_mut(), &args) };
    // SAFETY: the plugin NUL-terminates its message.
    let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
    assert_eq!(st, DLFUSE_STATUS_INTERNAL, "{}", msg);
    assert!(msg.starts_with("rust plugin panicked: ") && msg.contains("does not broadcast"), "{}", msg);
}

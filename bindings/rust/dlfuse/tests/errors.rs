//! Bad input: each call is refused with the registry's status and message, passed through
//! unchanged (compared with the same call made through dlfuse-sys and dlfuse_last_error),
//! and the message names the argument.
mod common;

use std::ffi::CStr;
use std::ptr;

use common::*;
use dlfuse::sys;
use dlfuse::{Activation, Status, TensorView, TensorViewMut};

fn last_error() -> String {
    // SAFETY: a NUL-terminated string owned by libdlfuse, copied at once.
    unsafe { CStr::from_ptr(sys::dlfuse_last_error()) }.to_string_lossy().into_owned()
}

/// Runs the safe call and the raw one; both must fail alike. Returns the error.
fn same_failure(
    safe: dlfuse::Result<()>,
    raw: impl FnOnce() -> sys::dlfuse_status_t,
    status: Status,
    needles: &[&str],
) -> dlfuse::Error {
    let e = safe.expect_err("the registry accepted a bad call");
    let raw_status = raw();
    let raw_msg = last_error();
    assert_eq!(e.status(), status, "{}", e);
    assert_eq!(e.status().to_raw(), raw_status, "{}", e);
    assert_eq!(e.message(), raw_msg);
    for n in needles {
        assert!(e.message().contains(n), "message {:?} lacks {:?}", e.message(), n);
    }
    assert!(e.to_string().contains(e.message()));
    e
}

fn matmul_raw(reg: &dlfuse::Registry, a: &TensorView, b: &TensorView, bias: &TensorView, out: &TensorViewMut) -> sys::dlfuse_status_t {
    let (a, b, bias, mut o) = (a.raw(), b.raw(), bias.raw(), out.raw());
    // SAFETY: the views are alive for the call.
    unsafe { sys::dlfuse_matmul_add_relu(reg.as_raw(), &a, &b, &bias, &mut o, 0, ptr::null_mut()) }
}

#[test]
fn bad_matmul_calls_carry_the_registry_message() {
    let reg = registry_with("rust");
    let a = vec![1.0f32; 5 * 7];
    let b = vec![1.0f32; 7 * 3];
    let bias = vec![0.0f32; 4];
    let mut out = vec![0.0f32; 5 * 4];
    let (va, vb, vbias3) = (TensorView::new(&a, &[5, 7]).unwrap(), TensorView::new(&b, &[7, 3]).unwrap(), TensorView::new(&bias[..3], &[3]).unwrap());

    // Output of the wrong shape.
    let mut vout = TensorViewMut::new(&mut out, &[5, 4]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va, &vb, &vbias3, &mut vout, false), || matmul_raw(&reg, &va, &vb, &vbias3, &vout), Status::InvalidArgument, &["argument 'out'", "[5, 4]", "expected [5, 3]"]);
    eprintln!("wrong out shape: {}", e);

    // K disagrees.
    let vb_bad = TensorView::new(&b[..6 * 3], &[6, 3]).unwrap();
    let mut vout = TensorViewMut::new(&mut out[..15], &[5, 3]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va, &vb_bad, &vbias3, &mut vout, false), || matmul_raw(&reg, &va, &vb_bad, &vbias3, &vout), Status::InvalidArgument, &["argument 'b'", "is 6", "expected 7"]);
    eprintln!("K mismatch: {}", e);

    // Bias that does not broadcast to out.
    let vbias4 = TensorView::new(&bias, &[4]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va, &vb, &vbias4, &mut vout, false), || matmul_raw(&reg, &va, &vb, &vbias4, &vout), Status::InvalidArgument, &["argument 'bias'", "[4]", "[5, 3]"]);
    eprintln!("bias: {}", e);

    // A 1-D operand.
    let va1 = TensorView::new(&a[..7], &[7]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va1, &vb, &vbias3, &mut vout, false), || matmul_raw(&reg, &va1, &vb, &vbias3, &vout), Status::InvalidArgument, &["argument 'a'", "ndim is 1", "expected >= 2"]);
    eprintln!("1-D a: {}", e);

    // Mixed dtypes.
    let a64 = vec![1.0f64; 5 * 7];
    let va64 = TensorView::new(&a64, &[5, 7]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va64, &vb, &vbias3, &mut vout, false), || matmul_raw(&reg, &va64, &vb, &vbias3, &vout), Status::InvalidArgument, &["argument 'b'", "dtype is float32", "expected float64"]);
    eprintln!("dtype mix: {}", e);

    // A negative stride, inside the slice (rows walked backwards).
    let va_neg = TensorView::strided(&a, &[5, 7], Some(&[-7, 1]), 4 * 7 * 4).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va_neg, &vb, &vbias3, &mut vout, false), || matmul_raw(&reg, &va_neg, &vb, &vbias3, &vout), Status::InvalidArgument, &["argument 'a'", "strides[0] is -7", "expected >= 0"]);
    eprintln!("negative stride: {}", e);

    // A first element not aligned to the item size.
    let va_mis = TensorView::strided(&a, &[5, 6], None, 2).unwrap();
    let vb_k6 = TensorView::new(&b[..18], &[6, 3]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va_mis, &vb_k6, &vbias3, &mut vout, false), || matmul_raw(&reg, &va_mis, &vb_k6, &vbias3, &vout), Status::InvalidArgument, &["argument 'a'", "aligned to 4 bytes"]);
    eprintln!("misaligned: {}", e);
    drop(vout);

    // float64 everywhere: the Rust plugin has no such kernel.
    let (b64, bias64) = (vec![1.0f64; 21], vec![0.0f64; 3]);
    let mut out64 = vec![0.0f64; 15];
    let (vb64, vbias64) = (TensorView::new(&b64, &[7, 3]).unwrap(), TensorView::new(&bias64, &[3]).unwrap());
    let mut vout64 = TensorViewMut::new(&mut out64, &[5, 3]).unwrap();
    let e = same_failure(reg.matmul_add_relu(&va64, &vb64, &vbias64, &mut vout64, false), || matmul_raw(&reg, &va64, &vb64, &vbias64, &vout64), Status::Unsupported, &["matmul_add_relu", "float64", "available: rust (cpu: float32)"]);
    eprintln!("unsupported: {}", e);
}

#[test]
fn bad_add_mul_and_backward_calls() {
    let reg = registry_with("rust");
    let x = vec![0.5f32; 12];
    let g = vec![0.5f32; 12];
    let bias = vec![0.0f32; 4];
    let mut out = vec![0.0f32; 12];
    let (vx, vbias) = (TensorView::new(&x, &[3, 4]).unwrap(), TensorView::new(&bias, &[4]).unwrap());

    let mut vout = TensorViewMut::new(&mut out[..8], &[2, 4]).unwrap();
    let safe = reg.add_mul_activation(&vx, &vx, &vbias, 1.0, Activation::Relu, &mut vout);
    let raw = || {
        let (x, y, b, mut o) = (vx.raw(), vx.raw(), vbias.raw(), vout.raw());
        // SAFETY: the views are alive for the call.
        unsafe { sys::dlfuse_add_mul_activation(reg.as_raw(), &x, &y, &b, 1.0, sys::DLFUSE_ACT_RELU, &mut o, ptr::null_mut()) }
    };
    let e = same_failure(safe, raw, Status::InvalidArgument, &["argument 'out'", "[2, 4]", "expected [3, 4]"]);
    eprintln!("add_mul out shape: {}", e);

    // A gradient of the wrong shape.
    let vg = TensorView::new(&g, &[3, 4]).unwrap();
    let mut gbias = vec![0.0f32; 3];
    let mut vgb = TensorViewMut::new(&mut gbias, &[3]).unwrap();
    let safe = reg.add_mul_activation_backward(&vg, &vx, &vx, &vbias, 1.0, Activation::Tanh, None, None, Some(&mut vgb));
    let raw = || {
        let (g, x, b, mut gb) = (vg.raw(), vx.raw(), vbias.raw(), vgb.raw());
        // SAFETY: the views are alive for the call.
        unsafe {
            sys::dlfuse_add_mul_activation_backward(reg.as_raw(), &g, &x, &x, &b, 1.0, sys::DLFUSE_ACT_TANH, ptr::null_mut(), ptr::null_mut(), &mut gb, ptr::null_mut())
        }
    };
    let e = same_failure(
        safe,
        raw,
        Status::InvalidArgument,
        &["argument 'grad_bias'", "shape is [3]", "expected [4]"],
    );
    eprintln!("grad_bias shape: {}", e);
}

#[test]
fn views_past_their_memory_are_refused_before_any_call() {
    let data = vec![0.0f32; 6];
    let e = TensorView::new(&data, &[2, 4]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("view extent"), "{}", e);
    assert!(TensorView::strided(&data, &[2, 3], Some(&[3, 1]), 4).is_err()); // one element past
    assert!(TensorView::strided(&data, &[2, 3], Some(&[-3, 1]), 0).is_err()); // before the start
    assert!(TensorView::strided(&data, &[2, 3], Some(&[3]), 0).is_err()); // strides of the wrong rank
    assert!(TensorView::strided(&data, &[3, 2], Some(&[2, 1]), 0).is_ok());
    assert!(TensorView::strided(&data, &[0, 100], None, 0).is_ok()); // empty: addresses nothing
    let huge = i64::MAX / 2;
    assert!(TensorView::new(&data, &[huge, huge, huge, huge]).is_err()); // overflowing extent
    let big = [i64::MAX; 8];
    assert!(TensorView::strided(&data, &big, Some(&big), 0).is_err());
}

#[test]
fn registry_errors() {
    let reg = registry_with("rust");
    let e = reg.load("/nonexistent/libdlfuse_nothing.so").unwrap_err();
    assert_eq!(e.status(), Status::NotFound, "{}", e); // no file there; LoadFailed: there but broken
    assert!(e.message().contains("/nonexistent/libdlfuse_nothing.so"), "{}", e);
    let e = reg.prefer(None, Some("no_such_plugin")).unwrap_err();
    eprintln!("prefer: {}", e);
    assert!(e.message().contains("no_such_plugin"), "{}", e);
    let e = reg.resolve("no_such_op", 1, dlfuse::FLOAT32).unwrap_err();
    assert_eq!(e.status(), Status::NotFound, "{}", e);
    assert!(e.message().contains("no_such_op"), "{}", e);
    let e = dlfuse::Registry::with_options(dlfuse::Discovery::NONE, &["a:b"]).err().unwrap();
    assert!(e.message().contains("plugin_paths[0]"), "{}", e);
}

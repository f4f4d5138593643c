//! A plugin's own op whose attributes reuse the core keys' numbers with other types and
//! ranges (testref_ops's testref_axpby, tests/plugins/testref/extra_op.cpp), called by name:
//! every attribute is taken by its schema (name, type, default, range), never by its key.
//!
//!   testref_axpby(x, y; ALPHA = 1.5 (FLOAT64, key 1: the core ACTIVATION's),
//!                 REPEAT = 3 (INT64 in [-1000, 1000], key 2: MULTIPLIER's),
//!                 BETA = 0.25 (FLOAT64, key 4: OUTPUT_ACTIVATION's),
//!                 MODE = 2 (INT64 in [0, 2], key 3: ALLOW_TF32's, a flag of default 0))
//!       -> SX * ALPHA * x + SY * REPEAT * y + BETA, (SX, SY) = (+1, -1), (-1, +1), (+1, +1)
//!          for MODE 0, 1, 2
//!   testref_axpby_backward(grad_out; ALPHA, REPEAT, MODE)
//!       -> SX * ALPHA * grad_out, SY * REPEAT * grad_out summed to y's shape
//!
//! Values are compared exactly with float64 computed here: x holds signed powers of two, y
//! and grad_out eighths, so every product is exact and each sum is rounded as the kernel
//! rounds it. The Python bindings' counterpart is bindings/python/tests/test_attr_keys.py.
mod common;

use std::ffi::{CStr, CString};
use std::ptr;

use dlfuse::sys;
use dlfuse::{AttrValue, Discovery, OutputShape, Registry, Status, TensorView, TensorViewMut};

const SHAPE_X: [i64; 2] = [3, 4];
const SHAPE_Y: [i64; 1] = [4];
const DEFAULTS: Attrs = Attrs { alpha: 1.5, repeat: 3, beta: 0.25, mode: 2 };
/// Every MODE, non-dyadic floats (a float32 or an integer on the way would change them),
/// negative REPEATs and both ends of its range.
const VALUES: [Attrs; 4] = [
    Attrs { alpha: 0.7, repeat: -2, beta: -1.25, mode: 0 },
    Attrs { alpha: 2.5, repeat: 7, beta: 0.1, mode: 1 },
    Attrs { alpha: -0.3, repeat: 1000, beta: -1e-3, mode: 2 },
    Attrs { alpha: 1.0 / 3.0, repeat: -1000, beta: 0.0, mode: 1 },
];

#[derive(Clone, Copy, Debug)]
struct Attrs {
    alpha: f64,
    repeat: i64,
    beta: f64,
    mode: i64,
}

impl Attrs {
    /// (SX * ALPHA, SY * REPEAT)
    fn coeffs(&self) -> (f64, f64) {
        let (sx, sy) = match self.mode {
            0 => (1.0, -1.0),
            1 => (-1.0, 1.0),
            _ => (1.0, 1.0),
        };
        (sx * self.alpha, sy * self.repeat as f64)
    }
    /// The forward's attributes by name, in the spellings given.
    fn named<'a>(&self, names: [&'a str; 4]) -> Vec<(&'a str, AttrValue)> {
        vec![
            (names[0], AttrValue::Float(self.alpha)),
            (names[1], AttrValue::Int(self.repeat)),
            (names[2], AttrValue::Float(self.beta)),
            (names[3], AttrValue::Int(self.mode)),
        ]
    }
    /// The backward's (no BETA).
    fn backward(&self) -> Vec<(&'static str, AttrValue)> {
        vec![
            ("alpha", AttrValue::Float(self.alpha)),
            ("repeat", AttrValue::Int(self.repeat)),
            ("mode", AttrValue::Int(self.mode)),
        ]
    }
}

/// x [3, 4]: signed powers of two in [1/4, 4]; y [4], g [3, 4]: eighths in [-2, 2].
fn data(seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s >> 33
    };
    let x = (0..12)
        .map(|_| {
            let r = next();
            let sign = if r & 1 == 0 { 1.0 } else { -1.0 };
            sign * 2f64.powi(((r >> 1) % 5) as i32 - 2)
        })
        .collect();
    let mut eighths = |n: usize| (0..n).map(|_| ((next() % 33) as f64 - 16.0) / 8.0).collect::<Vec<f64>>();
    let y = eighths(4);
    let g = eighths(12);
    (x, y, g)
}

fn forward_ref(x: &[f64], y: &[f64], a: Attrs) -> Vec<f64> {
    let (cx, cy) = a.coeffs();
    (0..12).map(|i| cx * x[i] + cy * y[i % 4] + a.beta).collect()
}

/// (grad_x [3, 4], grad_y summed to [4], grad_y at grad_out's shape [3, 4])
fn backward_ref(g: &[f64], a: Attrs) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (cx, cy) = a.coeffs();
    let gy: Vec<f64> = (0..4).map(|j| cy * (g[j] + g[4 + j] + g[8 + j])).collect();
    (g.iter().map(|v| cx * v).collect(), gy, g.iter().map(|v| cy * v).collect())
}

fn registry() -> Registry {
    let reg = Registry::with_options(Discovery::NONE, &[common::testref_ops_plugin()]).unwrap();
    let plugins = reg.plugins().unwrap();
    assert_eq!(plugins.len(), 1);
    assert!(plugins[0].available, "testref_ops: {}", plugins[0].reason);
    reg
}

fn forward(reg: &Registry, x: &[f64], y: &[f64], attrs: &[(&str, AttrValue)]) -> dlfuse::Result<Vec<f64>> {
    let (xv, yv) = (TensorView::new(x, &SHAPE_X).unwrap(), TensorView::new(y, &SHAPE_Y).unwrap());
    let mut out = reg.call::<f64>("testref_axpby", &[Some(&xv), Some(&yv)], attrs)?;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].shape, SHAPE_X);
    Ok(out.remove(0).data)
}

/// grad_x and grad_y summed to y's shape.
fn backward(reg: &Registry, g: &[f64], attrs: &[(&str, AttrValue)]) -> dlfuse::Result<(Vec<f64>, Vec<f64>)> {
    let gv = TensorView::new(g, &SHAPE_X).unwrap();
    let mut grads = reg.call_with::<f64>(
        "testref_axpby_backward",
        &[Some(&gv)],
        attrs,
        &[OutputShape::Inferred, OutputShape::Given(&SHAPE_Y)],
    )?;
    let gy = grads.pop().unwrap().unwrap();
    let gx = grads.pop().unwrap().unwrap();
    assert_eq!((gx.shape.as_slice(), gy.shape.as_slice()), (&SHAPE_X[..], &SHAPE_Y[..]));
    Ok((gx.data, gy.data))
}

fn exact(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{}: element count", what);
    for i in 0..got.len() {
        assert!(got[i] == want[i], "{}[{}]: got {:e}, expected {:e} exactly", what, i, got[i], want[i]);
    }
}

fn check(
    reg: &Registry,
    x: &[f64],
    y: &[f64],
    g: &[f64],
    attrs: &[(&str, AttrValue)],
    bwd: &[(&str, AttrValue)],
    want: Attrs,
) {
    let what = format!("{:?}", attrs);
    exact(&format!("out with {}", what), &forward(reg, x, y, attrs).unwrap(), &forward_ref(x, y, want));
    let (gx, gy) = backward(reg, g, bwd).unwrap();
    let (wx, wy, _) = backward_ref(g, want);
    exact(&format!("grad_x with {:?}", bwd), &gx, &wx);
    exact(&format!("grad_y with {:?}", bwd), &gy, &wy);
}

#[test]
fn schema_lists_the_keys_types_and_defaults_as_declared() {
    let reg = registry();
    let schemas = reg.op_schemas().unwrap();
    let fwd = schemas.iter().find(|s| s.name == "testref_axpby").expect("testref_axpby is listed");
    assert!(fwd.plugin.is_some());
    let attrs: Vec<(&str, i32, AttrValue, bool)> =
        fwd.attrs.iter().map(|a| (a.name.as_str(), a.key, a.default, a.required)).collect();
    assert_eq!(
        attrs,
        [
            ("ALPHA", 1, AttrValue::Float(1.5), false),
            ("REPEAT", 2, AttrValue::Int(3), false),
            ("BETA", 4, AttrValue::Float(0.25), false),
            ("MODE", 3, AttrValue::Int(2), false),
        ]
    );
    let bwd = schemas.iter().find(|s| s.name == "testref_axpby_backward").expect("its backward is listed");
    let names: Vec<&str> = bwd.attrs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["ALPHA", "REPEAT", "MODE"]);
    assert_eq!(
        bwd.outputs.iter().map(|o| (o.name.as_str(), o.reducible)).collect::<Vec<_>>(),
        [("grad_x", true), ("grad_y", true)]
    );
}

#[test]
fn defaults_come_from_the_schema() {
    let reg = registry();
    let (x, y, g) = data(1);
    check(&reg, &x, &y, &g, &[], &[], DEFAULTS);
    // Each attribute alone: the others keep their defaults.
    check(
        &reg,
        &x,
        &y,
        &g,
        &[("alpha", AttrValue::Float(0.7))],
        &[("alpha", AttrValue::Float(0.7))],
        Attrs { alpha: 0.7, ..DEFAULTS },
    );
    check(
        &reg,
        &x,
        &y,
        &g,
        &[("repeat", AttrValue::Int(-2))],
        &[("repeat", AttrValue::Int(-2))],
        Attrs { repeat: -2, ..DEFAULTS },
    );
    check(&reg, &x, &y, &g, &[("beta", AttrValue::Float(0.1))], &[], Attrs { beta: 0.1, ..DEFAULTS });
    for mode in 0..3 {
        let m = [("mode", AttrValue::Int(mode))];
        check(&reg, &x, &y, &g, &m, &m, Attrs { mode, ..DEFAULTS });
    }
    // The backward at grad_out's shape (`call`: reducible outputs at their widest).
    let gv = TensorView::new(&g[..], &SHAPE_X).unwrap();
    let full = reg.call::<f64>("testref_axpby_backward", &[Some(&gv)], &[]).unwrap();
    let (wx, _, wy_full) = backward_ref(&g, DEFAULTS);
    assert_eq!((full[0].shape.as_slice(), full[1].shape.as_slice()), (&SHAPE_X[..], &SHAPE_X[..]));
    exact("grad_x (call)", &full[0].data, &wx);
    exact("grad_y at grad_out's shape (call)", &full[1].data, &wy_full);
}

#[test]
fn values_are_taken_by_name_and_type_not_truncated() {
    let reg = registry();
    let (x, y, g) = data(2);
    for a in VALUES.iter() {
        check(&reg, &x, &y, &g, &a.named(["alpha", "repeat", "beta", "mode"]), &a.backward(), *a);
        check(&reg, &x, &y, &g, &a.named(["ALPHA", "Repeat", "bEtA", "MODE"]), &a.backward(), *a); // any case
        let mut reversed = a.named(["alpha", "repeat", "beta", "mode"]);
        reversed.reverse(); // any order
        check(&reg, &x, &y, &g, &reversed, &a.backward(), *a);
    }
    // An integer for a FLOAT64 attribute is that float.
    let attrs = [("alpha", AttrValue::Int(2)), ("beta", AttrValue::Int(-1)), ("mode", AttrValue::Int(0))];
    check(&reg, &x, &y, &g, &attrs, &[attrs[0], attrs[2]], Attrs { alpha: 2.0, beta: -1.0, mode: 0, ..DEFAULTS });
    // Into outputs the caller made, grad_x skipped.
    let a = VALUES[1];
    let gv = TensorView::new(&g[..], &SHAPE_X).unwrap();
    let mut gy = vec![f64::NAN; 4];
    let mut gyv = TensorViewMut::new(&mut gy[..], &[1, 4]).unwrap();
    reg.call_into("testref_axpby_backward", &[Some(&gv)], &a.backward(), &mut [None, Some(&mut gyv)]).unwrap();
    drop(gyv);
    exact("grad_y (call_into)", &gy, &backward_ref(&g, a).1);
    let skipped = reg
        .call_with::<f64>(
            "testref_axpby_backward",
            &[Some(&gv)],
            &a.backward(),
            &[OutputShape::Skip, OutputShape::Inferred],
        )
        .unwrap();
    assert!(skipped[0].is_none());
    exact("grad_y (grad_x skipped)", &skipped[1].as_ref().unwrap().data, &backward_ref(&g, a).2);
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string owned by libdlfuse, copied at once.
    unsafe { CStr::from_ptr(sys::dlfuse_last_error()) }.to_string_lossy().into_owned()
}

/// The same call made through dlfuse-sys with one raw attribute: its status and message.
fn raw_forward(reg: &Registry, x: &[f64], y: &[f64], attr: sys::dlfuse_attr_t) -> (sys::dlfuse_status_t, String) {
    let (xv, yv) = (TensorView::new(x, &SHAPE_X).unwrap(), TensorView::new(y, &SHAPE_Y).unwrap());
    let mut out = vec![0.0f64; 12];
    let ov = TensorViewMut::new(&mut out[..], &SHAPE_X).unwrap();
    let (xt, yt, mut ot) = (xv.raw(), yv.raw(), ov.raw());
    let name = CString::new("testref_axpby").unwrap();
    let mut op: sys::dlfuse_op_t = ptr::null_mut();
    let ins = [&xt as *const sys::DLTensor, &yt as *const sys::DLTensor];
    let outs = [&mut ot as *mut sys::DLTensor];
    // SAFETY: valid registry and string; the views are alive for the call.
    let status = unsafe {
        assert_eq!(sys::dlfuse_op_get(reg.as_raw(), name.as_ptr(), &mut op), sys::DLFUSE_STATUS_OK);
        sys::dlfuse_op_call(op, ins.as_ptr(), 2, outs.as_ptr(), 1, &attr, 1, ptr::null_mut())
    };
    (status, last_error())
}

#[test]
fn bad_values_are_refused_naming_the_attribute() {
    let reg = registry();
    let (x, y, g) = data(3);
    let expect = |attrs: &[(&str, AttrValue)], status: Status, message: &str| {
        let e = forward(&reg, &x, &y, attrs).expect_err("a bad attribute was accepted");
        assert_eq!((e.status(), e.message()), (status, message));
    };
    // A float for an INT64 attribute: refused by this crate, never truncated.
    expect(
        &[("mode", AttrValue::Float(1.5))],
        Status::InvalidArgument,
        "testref_axpby: attribute MODE: expected an integer (INT64), got the float 1.5",
    );
    expect(
        &[("repeat", AttrValue::Float(2.0))],
        Status::InvalidArgument,
        "testref_axpby: attribute REPEAT: expected an integer (INT64), got the float 2.0",
    );
    // Out of the schema's range (MODE 2 is in it, though outside ALLOW_TF32's [0, 1]): the
    // registry's refusal, unchanged.
    for (attr, key, v) in [("mode", 3, 3i64), ("MODE", 3, -1), ("repeat", 2, 1001), ("repeat", 2, -1001)] {
        let e = forward(&reg, &x, &y, &[(attr, AttrValue::Int(v))]).expect_err("out of range");
        let name = attr.to_ascii_uppercase();
        let range = if name == "MODE" { "0..2" } else { "-1000..1000" };
        assert_eq!(e.status(), Status::InvalidArgument);
        assert_eq!(e.message(), format!("testref_axpby: attribute {} is {}; expected {}", name, v, range));
        let raw =
            sys::dlfuse_attr_t { key, type_: sys::DLFUSE_ATTR_INT64, value: sys::dlfuse_attr_value_t { i64_: v } };
        assert_eq!(raw_forward(&reg, &x, &y, raw), (e.status().to_raw(), e.message().to_string()));
    }
    // The raw call with a float under MODE's key (ALLOW_TF32's number): refused by its type.
    let raw =
        sys::dlfuse_attr_t { key: 3, type_: sys::DLFUSE_ATTR_FLOAT64, value: sys::dlfuse_attr_value_t { f64_: 1.0 } };
    let (status, message) = raw_forward(&reg, &x, &y, raw);
    assert_eq!(status, Status::InvalidArgument.to_raw());
    assert!(message.starts_with("testref_axpby: attribute MODE: type is "), "{}", message);
    // Named twice (in two cases), unknown, or one the backward does not take.
    expect(
        &[("mode", AttrValue::Int(1)), ("MODE", AttrValue::Int(2))],
        Status::InvalidArgument,
        "testref_axpby: attribute MODE given twice; expected once",
    );
    expect(
        &[("allow_tf32", AttrValue::Int(1))],
        Status::InvalidArgument,
        "testref_axpby: attribute 'allow_tf32': expected one of ALPHA, REPEAT, BETA, MODE, got 'allow_tf32'",
    );
    let e = backward(&reg, &g, &[("beta", AttrValue::Float(0.5))]).unwrap_err();
    assert_eq!(
        e.message(),
        "testref_axpby_backward: attribute 'beta': expected one of ALPHA, REPEAT, MODE, got 'beta'"
    );
    let e = backward(&reg, &g, &[("mode", AttrValue::Int(7))]).unwrap_err();
    assert_eq!(e.message(), "testref_axpby_backward: attribute MODE is 7; expected 0..2");
    // call_into refuses the same, before writing anything.
    let gv = TensorView::new(&g[..], &SHAPE_X).unwrap();
    let mut gx = vec![f64::NAN; 12];
    let mut gxv = TensorViewMut::new(&mut gx[..], &SHAPE_X).unwrap();
    let e = reg
        .call_into(
            "testref_axpby_backward",
            &[Some(&gv)],
            &[("mode", AttrValue::Float(0.0))],
            &mut [Some(&mut gxv), None],
        )
        .unwrap_err();
    assert_eq!(e.message(), "testref_axpby_backward: attribute MODE: expected an integer (INT64), got the float 0.0");
    let e = reg
        .call_into("testref_axpby_backward", &[Some(&gv)], &[("mode", AttrValue::Int(-5))], &mut [Some(&mut gxv), None])
        .unwrap_err();
    assert_eq!(e.message(), "testref_axpby_backward: attribute MODE is -5; expected 0..2");
    drop(gxv);
    assert!(gx.iter().all(|v| v.is_nan()), "a refused call wrote its output");
    // The registry is still usable after every refusal.
    check(&reg, &x, &y, &g, &[], &[], DEFAULTS);
}

//! Both ops, forward and backward, through every CPU plugin (onednn, testref, and the
//! Rust plugin), against the float64 reference of tests/common, with broadcasting,
//! strides, byte offsets, absent gradients and in-place.
mod common;

use common::*;
use dlfuse::{Activation, Device, FLOAT32};

fn check_dispatch(reg: &dlfuse::Registry, name: &str) {
    for op in ["matmul_add_relu", "matmul_add_relu_backward", "add_mul_activation", "add_mul_activation_backward"] {
        let i = reg.resolve(op, Device::CPU.device_type, FLOAT32).unwrap();
        assert_eq!(reg.plugin(i).unwrap().name, name, "{} dispatches elsewhere", op);
    }
}

struct MatmulCase {
    a: Vec<i64>,
    b: Vec<i64>,
    bias: Vec<i64>,
    layouts: [Layout; 4], // a, b, bias, out (and the gradients of a, b, bias)
}

fn matmul_cases() -> Vec<MatmulCase> {
    use Layout::*;
    vec![
        MatmulCase { a: vec![5, 7], b: vec![7, 3], bias: vec![3], layouts: [Compact; 4] },
        MatmulCase { a: vec![2, 1, 4, 6], b: vec![3, 6, 5], bias: vec![4, 1], layouts: [Compact; 4] },
        MatmulCase { a: vec![6, 4], b: vec![4, 5], bias: vec![1, 5], layouts: [Transposed, Offset, Padded, Padded] },
        MatmulCase { a: vec![3, 4, 2], b: vec![2, 6], bias: vec![3, 4, 6], layouts: [Offset, Transposed, Transposed, Offset] },
        MatmulCase { a: vec![4, 0], b: vec![0, 3], bias: vec![4, 3], layouts: [Compact; 4] },
    ]
}

fn run_matmul(plugin: &str) {
    let reg = registry_with(plugin);
    check_dispatch(&reg, plugin);
    let mut rng = Lcg::new(7);
    for (ci, c) in matmul_cases().iter().enumerate() {
        let what = format!("{} matmul case {}", plugin, ci);
        let (a, b, bias) = (rng.tensor(&c.a), rng.tensor(&c.b), rng.tensor(&c.bias));
        let want = matmul_ref(&a, &b, &bias);
        let (sa, sb, sbias) = (Stored::new(&a, c.layouts[0]), Stored::new(&b, c.layouts[1]), Stored::new(&bias, c.layouts[2]));
        let mut sout = Stored::output(&want.shape, c.layouts[3]);
        reg.matmul_add_relu(&sa.view(), &sb.view(), &sbias.view(), &mut sout.view_mut(), false).unwrap();
        assert_close(&format!("{} out", what), &sout.values(), &want);

        // Backward from the kernel's own out, as training does; the reference sees it too.
        let mut out = Dense::zeros(&want.shape);
        out.data = sout.values().iter().map(|&v| v as f64).collect();
        let g = rng.tensor(&want.shape);
        let (wa, wb, wbias) = matmul_backward_ref(&g, &a, &b, &out, &c.bias);
        let (sg, so) = (Stored::new(&g, c.layouts[3]), Stored::new(&out, Layout::Compact));
        let mut ga = Stored::output(&c.a, c.layouts[0]);
        let mut gb = Stored::output(&c.b, c.layouts[1]);
        let mut gbias = Stored::output(&c.bias, c.layouts[2]);
        reg.matmul_add_relu_backward(
            &sg.view(),
            &sa.view(),
            &sb.view(),
            &so.view(),
            Some(&mut ga.view_mut()),
            Some(&mut gb.view_mut()),
            Some(&mut gbias.view_mut()),
            false,
        )
        .unwrap();
        assert_close(&format!("{} grad_a", what), &ga.values(), &wa);
        assert_close(&format!("{} grad_b", what), &gb.values(), &wb);
        assert_close(&format!("{} grad_bias", what), &gbias.values(), &wbias);

        // Absent gradients: only grad_b, the others NULL and their memory untouched.
        let mut gb2 = Stored::output(&c.b, c.layouts[1]);
        reg.matmul_add_relu_backward(&sg.view(), &sa.view(), &sb.view(), &so.view(), None, Some(&mut gb2.view_mut()), None, false)
            .unwrap();
        assert_close(&format!("{} grad_b alone", what), &gb2.values(), &wb);
    }
}

fn run_add_mul(plugin: &str) {
    let reg = registry_with(plugin);
    let mut rng = Lcg::new(11);
    let shapes: [(&[i64], &[i64], &[i64], Layout); 3] = [
        (&[3, 1, 5], &[4, 5], &[5], Layout::Compact),
        (&[4, 6], &[4, 6], &[4, 1], Layout::Transposed),
        (&[2, 3], &[], &[2, 3], Layout::Offset),
    ];
    for act in Activation::ALL {
        for (si, (xs, ys, bs, layout)) in shapes.iter().enumerate() {
            let what = format!("{} add_mul {:?} case {}", plugin, act, si);
            let m = if si == 1 { -1.25 } else { 0.75 };
            let (x, y, bias) = (rng.tensor(xs), rng.tensor(ys), rng.tensor(bs));
            let want = add_mul_ref(&x, &y, &bias, m, act);
            let (sx, sy, sb) = (Stored::new(&x, *layout), Stored::new(&y, Layout::Compact), Stored::new(&bias, Layout::Offset));
            let mut sout = Stored::output(&want.shape, *layout);
            reg.add_mul_activation(&sx.view(), &sy.view(), &sb.view(), m, act, &mut sout.view_mut()).unwrap();
            assert_close(&format!("{} out", what), &sout.values(), &want);

            let g = rng.tensor(&want.shape);
            let (wx, wy, wb) = add_mul_backward_ref(&g, &x, &y, &bias, m, act);
            let sg = Stored::new(&g, *layout);
            let mut gx = Stored::output(xs, *layout);
            let mut gy = Stored::output(ys, Layout::Padded);
            let mut gb = Stored::output(bs, Layout::Offset);
            reg.add_mul_activation_backward(
                &sg.view(),
                &sx.view(),
                &sy.view(),
                &sb.view(),
                m,
                act,
                Some(&mut gx.view_mut()),
                Some(&mut gy.view_mut()),
                Some(&mut gb.view_mut()),
            )
            .unwrap();
            assert_close(&format!("{} grad_x", what), &gx.values(), &wx);
            assert_close(&format!("{} grad_y", what), &gy.values(), &wy);
            assert_close(&format!("{} grad_bias", what), &gb.values(), &wb);
        }
    }

    // In place: x becomes the output.
    let (x, y, bias) = (rng.tensor(&[5, 4]), rng.tensor(&[5, 4]), rng.tensor(&[4]));
    let want = add_mul_ref(&x, &y, &bias, 0.5, Activation::Tanh);
    let mut sx = Stored::new(&x, Layout::Padded);
    let (sy, sb) = (Stored::new(&y, Layout::Compact), Stored::new(&bias, Layout::Compact));
    reg.add_mul_activation_in_place(&mut sx.view_mut(), &sy.view(), &sb.view(), 0.5, Activation::Tanh).unwrap();
    assert_close(&format!("{} in place", plugin), &sx.values(), &want);

    // multiplier * y is always computed: 0 * Inf is NaN, and relu(NaN) is NaN.
    let xs = [1.0f32, -1.0, 2.0];
    let ys = [f32::INFINITY, 1.0, f32::NAN];
    let bs = [0.0f32];
    let mut out = [0.0f32; 3];
    let (vx, vy, vb) = (
        dlfuse::TensorView::new(&xs, &[3]).unwrap(),
        dlfuse::TensorView::new(&ys, &[3]).unwrap(),
        dlfuse::TensorView::new(&bs, &[1]).unwrap(),
    );
    reg.add_mul_activation(&vx, &vy, &vb, 0.0, Activation::Relu, &mut dlfuse::TensorViewMut::new(&mut out, &[3]).unwrap())
        .unwrap();
    assert!(out[0].is_nan() && out[1] == 0.0 && out[2].is_nan(), "{}: {:?}", plugin, out);
}

#[test]
fn matmul_onednn() {
    run_matmul("onednn");
}
#[test]
fn matmul_testref() {
    run_matmul("testref");
}
#[test]
fn matmul_rust() {
    run_matmul("rust");
}
#[test]
fn add_mul_onednn() {
    run_add_mul("onednn");
}
#[test]
fn add_mul_testref() {
    run_add_mul("testref");
}
#[test]
fn add_mul_rust() {
    run_add_mul("rust");
}

/// Device memory through the device services: upload, run on views of the buffers,
/// download; the buffers free themselves.
#[test]
fn device_buffers_round_trip() {
    for plugin in CPU_PLUGINS {
        let reg = registry_with(plugin);
        let mut rng = Lcg::new(3);
        let (a, b, bias) = (rng.tensor(&[3, 4]), rng.tensor(&[4, 2]), rng.tensor(&[2]));
        let want = matmul_ref(&a, &b, &bias);
        let mut da = reg.alloc(Device::CPU, 12 * 4).unwrap();
        let mut db = reg.alloc(Device::CPU, 8 * 4).unwrap();
        let mut dbias = reg.alloc(Device::CPU, 2 * 4).unwrap();
        let mut dout = reg.alloc(Device::CPU, 6 * 4 + 8).unwrap();
        da.copy_from_host(0, &a.f32()).unwrap();
        db.copy_from_host(0, &b.f32()).unwrap();
        dbias.copy_from_host(0, &bias.f32()).unwrap();
        {
            let (va, vb, vbias) = (
                da.view(FLOAT32, &[3, 4], None, 0).unwrap(),
                db.view(FLOAT32, &[4, 2], None, 0).unwrap(),
                dbias.view(FLOAT32, &[2], None, 0).unwrap(),
            );
            let mut vout = dout.view_mut(FLOAT32, &[3, 2], None, 8).unwrap();
            reg.matmul_add_relu(&va, &vb, &vbias, &mut vout, false).unwrap();
        }
        let mut host = vec![0.0f32; 6];
        dout.copy_to_host(8, &mut host).unwrap();
        assert_close(&format!("{} device out", plugin), &host, &want);
        // Out-of-range copies and views are refused before any C call.
        assert!(dout.copy_to_host(16, &mut host).is_err());
        assert!(dout.view(FLOAT32, &[3, 3], None, 0).is_err());
    }
}

#[test]
fn send_and_sync_where_the_abi_allows() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<dlfuse::Registry>();
    send_sync::<dlfuse::DeviceBuffer<'static>>();
    send_sync::<dlfuse::TensorView<'static>>();
    send_sync::<dlfuse::TensorViewMut<'static>>();
    send_sync::<dlfuse::Error>();
    // And used that way: one registry, calls from several threads at once.
    let reg = registry_with("rust");
    std::thread::scope(|s| {
        for t in 0..4 {
            let reg = &reg;
            s.spawn(move || {
                let mut rng = Lcg::new(100 + t);
                let (x, y, b) = (rng.tensor(&[8, 8]), rng.tensor(&[8, 8]), rng.tensor(&[8]));
                let want = add_mul_ref(&x, &y, &b, 0.5, Activation::Silu);
                for _ in 0..20 {
                    let (sx, sy, sb) = (Stored::new(&x, Layout::Compact), Stored::new(&y, Layout::Compact), Stored::new(&b, Layout::Compact));
                    let mut so = Stored::output(&[8, 8], Layout::Compact);
                    reg.add_mul_activation(&sx.view(), &sy.view(), &sb.view(), 0.5, Activation::Silu, &mut so.view_mut()).unwrap();
                    assert_close("threaded", &so.values(), &want);
                }
            });
        }
    });
}

/// The ABI 1.1 functions that only dlfuse-sys declares, called through the safe views' C
/// form on testref: a wrong declaration (argument order, a missing argument) gives wrong
/// values or an error here.
#[test]
fn abi_1_1_functions_through_sys() {
    use dlfuse::sys;
    use dlfuse::TensorView;
    let reg = registry_with("testref");
    let last_error = || unsafe { std::ffi::CStr::from_ptr(sys::dlfuse_last_error()) }.to_string_lossy().into_owned();
    let (a, b, bias, res) = ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0f32, -1.0, 0.5, 2.0, -2.0, 1.0], [0.25f32, -8.0], [10.0f32, 20.0, 30.0, 40.0]);
    let (va, vb) = (TensorView::new(&a, &[2, 3]).unwrap(), TensorView::new(&b, &[3, 2]).unwrap());
    let (vbias, vres) = (TensorView::new(&bias, &[2]).unwrap(), TensorView::new(&res, &[2, 2]).unwrap());
    // a @ b = [[-4, 6], [-5.5, 12]]
    let mm = [-4.0f32, 6.0, -5.5, 12.0];
    let want_res: Vec<f32> = (0..4).map(|i| mm[i] + bias[i % 2] + res[i]).collect();
    let want_relu: Vec<f32> = (0..4).map(|i| (mm[i] + bias[i % 2]).max(0.0)).collect();
    let mut out = [f32::NAN; 4];
    let mut act = [f32::NAN; 4];
    {
        let (ra, rb, rbias, rres) = (va.raw(), vb.raw(), vbias.raw(), vres.raw());
        let mut vout = dlfuse::TensorViewMut::new(&mut out, &[2, 2]).unwrap();
        let mut rout = vout.raw();
        let st = unsafe { sys::dlfuse_matmul_add_residual(reg.as_raw(), &ra, &rb, &rbias, &rres, &mut rout, 0, std::ptr::null_mut()) };
        assert_eq!(st, sys::DLFUSE_STATUS_OK, "{}", last_error());
        let mut vact = dlfuse::TensorViewMut::new(&mut act, &[2, 2]).unwrap();
        let mut ract = vact.raw();
        let st = unsafe {
            sys::dlfuse_matmul_add_activation(reg.as_raw(), &ra, &rb, &rbias, sys::DLFUSE_ACT_RELU, &mut ract, std::ptr::null_mut(), 0, std::ptr::null_mut())
        };
        assert_eq!(st, sys::DLFUSE_STATUS_OK, "{}", last_error());
    }
    assert_eq!(out.to_vec(), want_res);
    assert_eq!(act.to_vec(), want_relu);
}

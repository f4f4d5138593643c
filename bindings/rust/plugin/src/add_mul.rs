//! add_mul_activation and its backward (docs/ops.md): pre = x + bias + multiplier * y in
//! float64, every term computed (0 * Inf is NaN), gradients reduced to their input's
//! shape by summing in float64.
use std::ffi::c_void;

use dlfuse_sys::*;

use crate::activation;
use crate::args::{run_kernel, Call};
use crate::guard::Failure;
use crate::strided::{compact_strides, numel, walk};

pub unsafe extern "C" fn forward_entry(
    _state: *mut c_void,
    _kernel_data: *mut c_void,
    args: *const dlfuse_kernel_args_t,
) -> dlfuse_status_t {
    // SAFETY: args is the registry\'s.
    unsafe { run_kernel(args, "add_mul_activation", 3, 1, forward) }
}

pub unsafe extern "C" fn backward_entry(
    _state: *mut c_void,
    _kernel_data: *mut c_void,
    args: *const dlfuse_kernel_args_t,
) -> dlfuse_status_t {
    // SAFETY: args is the registry\'s.
    unsafe { run_kernel(args, "add_mul_activation_backward", 4, 3, backward) }
}

fn forward(call: &Call) -> Result<(), Failure> {
    let act = call.activation()?;
    let m = call.multiplier();
    let (x, y, bias) = (&call.inputs[0], &call.inputs[1], &call.inputs[2]);
    let out = match &call.outputs[0] {
        Some(o) => o,
        None => return Err(crate::guard::invalid("add_mul_activation: out: expected a DLTensor, got NULL".to_string())),
    };
    let shape = &out.shape;
    let (xs, ys, bs) = (x.broadcast_strides(shape), y.broadcast_strides(shape), bias.broadcast_strides(shape));
    // In place (out is exactly x), each element is read before it is written.
    walk(shape, [&xs, &ys, &bs, &out.strides], |[xo, yo, bo, oo]| unsafe {
        let pre = x.read(xo) as f64 + bias.read(bo) as f64 + m * y.read(yo) as f64;
        out.write(oo, activation::forward(act, pre) as f32);
    });
    Ok(())
}

fn backward(call: &Call) -> Result<(), Failure> {
    let act = call.activation()?;
    let m = call.multiplier();
    let (g, x, y, bias) = (&call.inputs[0], &call.inputs[1], &call.inputs[2], &call.inputs[3]);
    let shape = &g.shape;
    let (xs, ys, bs) = (x.broadcast_strides(shape), y.broadcast_strides(shape), bias.broadcast_strides(shape));
    // One float64 accumulator per present gradient, compact in the gradient's own shape,
    // read along the output's shape with 0 strides where that input was broadcast.
    let mut grads: Vec<(usize, Vec<f64>, Vec<i64>)> = Vec::new();
    for (slot, out) in call.outputs.iter().enumerate() {
        if let Some(o) = out {
            let acc_strides = crate::strided::broadcast(&o.shape, &compact_strides(&o.shape), shape);
            grads.push((slot, vec![0.0; numel(&o.shape)], acc_strides));
        }
    }
    if grads.is_empty() {
        return Ok(());
    }
    let zero = vec![0i64; shape.len()];
    let acc_strides = |slot: usize| grads.iter().find(|g| g.0 == slot).map(|g| g.2.clone()).unwrap_or_else(|| zero.clone());
    let (ax, ay, ab) = (acc_strides(0), acc_strides(1), acc_strides(2));
    let mut acc: [Option<Vec<f64>>; 3] = [None, None, None];
    for (slot, v, _) in grads.drain(..) {
        acc[slot] = Some(v);
    }
    walk(shape, [&g.strides, &xs, &ys, &bs, &ax, &ay, &ab], |[go, xo, yo, bo, gx, gy, gb]| unsafe {
        let pre = x.read(xo) as f64 + bias.read(bo) as f64 + m * y.read(yo) as f64;
        let d = activation::backward(act, pre, g.read(go) as f64);
        if let Some(a) = &mut acc[0] {
            a[gx as usize] += d;
        }
        if let Some(a) = &mut acc[1] {
            a[gy as usize] += grad_y_term(m, d);
        }
        if let Some(a) = &mut acc[2] {
            a[gb as usize] += d;
        }
    });
    for (slot, a) in acc.iter().enumerate() {
        if let (Some(a), Some(o)) = (a, &call.outputs[slot]) {
            // SAFETY: o is an output view of a's element count.
            unsafe { o.store(a) };
        }
    }
    Ok(())
}

#[cfg(not(feature = "wrong-grad"))]
fn grad_y_term(m: f64, d: f64) -> f64 {
    m * d
}

/// The deliberate bug of the `wrong-grad` build: grad_y forgets the multiplier.
#[cfg(feature = "wrong-grad")]
fn grad_y_term(_m: f64, d: f64) -> f64 {
    d
}

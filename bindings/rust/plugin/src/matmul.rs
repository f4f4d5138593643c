//! matmul_add_relu and its backward (docs/ops.md). Sums run in float64 over float32
//! operands (each product is exact), rounded once to float32. Batch dims broadcast;
//! the gradients of a broadcast operand are summed over the batch dims it was
//! broadcast along.
use std::ffi::c_void;

use dlfuse_sys::*;

use crate::args::{run_kernel, Call};
use crate::guard::{invalid, Failure};
use crate::strided::{broadcast, compact_strides, numel, walk, Strided};

pub unsafe extern "C" fn forward_entry(
    _state: *mut c_void,
    _kernel_data: *mut c_void,
    args: *const dlfuse_kernel_args_t,
) -> dlfuse_status_t {
    // SAFETY: args is the registry\'s.
    unsafe { run_kernel(args, "matmul_add_relu", 3, 1, forward) }
}

pub unsafe extern "C" fn backward_entry(
    _state: *mut c_void,
    _kernel_data: *mut c_void,
    args: *const dlfuse_kernel_args_t,
) -> dlfuse_status_t {
    // SAFETY: args is the registry\'s.
    unsafe { run_kernel(args, "matmul_add_relu_backward", 4, 3, backward) }
}

/// The last two dims' strides and the batch dims' strides along `batch` of a view.
struct Operand {
    batch: Vec<i64>,
    row: i64,
    col: i64,
}

fn operand(view: &Strided, batch_shape: &[i64], what: &str) -> Result<Operand, Failure> {
    let nd = view.ndim();
    if nd < 2 {
        return Err(invalid(format!("{}: expected at least 2 dims, got {}", what, nd)));
    }
    Ok(Operand {
        batch: broadcast(&view.shape[..nd - 2], &view.strides[..nd - 2], batch_shape),
        row: view.strides[nd - 2],
        col: view.strides[nd - 1],
    })
}

fn relu(v: f64) -> f64 {
    if v > 0.0 || v.is_nan() {
        v
    } else {
        0.0
    }
}

fn forward(call: &Call) -> Result<(), Failure> {
    let (a, b, bias) = (&call.inputs[0], &call.inputs[1], &call.inputs[2]);
    let out = call.outputs[0].as_ref().ok_or_else(|| invalid("matmul_add_relu: out: expected a DLTensor, got NULL".to_string()))?;
    let nd = out.ndim();
    if nd < 2 || a.ndim() < 2 {
        return Err(invalid(format!(
            "matmul_add_relu: out, a: expected at least 2 dims each, got {} and {}",
            nd,
            a.ndim()
        )));
    }
    let (m, n, k) = (out.shape[nd - 2], out.shape[nd - 1], a.shape[a.ndim() - 1]);
    let batch = &out.shape[..nd - 2];
    let (oa, ob) = (operand(a, batch, "a")?, operand(b, batch, "b")?);
    let bias_s = bias.broadcast_strides(&out.shape);
    let (bias_row, bias_col) = (bias_s[nd - 2], bias_s[nd - 1]);
    walk(batch, [&oa.batch, &ob.batch, &bias_s[..nd - 2], &out.strides[..nd - 2]], |[ab, bb, cb, ob_]| {
        for i in 0..m {
            for j in 0..n {
                let mut sum = 0.0f64;
                for p in 0..k {
                    // SAFETY: indices within the validated shapes.
                    unsafe {
                        sum += a.read(ab + i * oa.row + p * oa.col) as f64 * b.read(bb + p * ob.row + j * ob.col) as f64;
                    }
                }
                // SAFETY: as above; out is an output view.
                unsafe {
                    let v = sum + bias.read(cb + i * bias_row + j * bias_col) as f64;
                    out.write(ob_ + i * out.strides[nd - 2] + j * out.strides[nd - 1], relu(v) as f32);
                }
            }
        }
    });
    Ok(())
}

fn backward(call: &Call) -> Result<(), Failure> {
    let (g, a, b, out) = (&call.inputs[0], &call.inputs[1], &call.inputs[2], &call.inputs[3]);
    let nd = out.ndim();
    if nd < 2 || a.ndim() < 2 {
        return Err(invalid(format!(
            "matmul_add_relu_backward: out, a: expected at least 2 dims each, got {} and {}",
            nd,
            a.ndim()
        )));
    }
    let (m, n, k) = (out.shape[nd - 2], out.shape[nd - 1], a.shape[a.ndim() - 1]);
    let shape = &out.shape;
    let batch = &shape[..nd - 2];

    // dZ = where(out > 0 or isnan(out), grad_out, 0), compact in out's shape: a select,
    // so a NaN or Inf grad_out never leaks where out <= 0.
    let mut dz = vec![0.0f64; numel(shape)];
    let dz_strides = compact_strides(shape);
    walk(shape, [&dz_strides, &g.strides, &out.strides], |[d, go, oo]| unsafe {
        let o = out.read(oo);
        if o > 0.0 || o.is_nan() {
            dz[d as usize] = g.read(go) as f64;
        }
    });
    let dzb = &dz_strides[..nd - 2];
    let (ga, gb, gbias) = (&call.outputs[0], &call.outputs[1], &call.outputs[2]);

    if let Some(ga) = ga {
        // grad_a[.., i, p] = sum_j dZ[.., i, j] * b[.., p, j], summed over a's broadcast batch.
        let ob = operand(b, batch, "b")?;
        let acc_batch = broadcast(&ga.shape[..ga.ndim() - 2], &compact_strides(&ga.shape)[..ga.ndim() - 2], batch);
        let mut acc = vec![0.0f64; numel(&ga.shape)];
        walk(batch, [&acc_batch, &ob.batch, dzb], |[ab, bb, db]| {
            for i in 0..m {
                for p in 0..k {
                    let mut s = 0.0f64;
                    for j in 0..n {
                        // SAFETY: within b's validated shape.
                        s += dz[(db + i * n + j) as usize] * unsafe { b.read(bb + p * ob.row + j * ob.col) } as f64;
                    }
                    acc[(ab + i * k + p) as usize] += s;
                }
            }
        });
        // SAFETY: ga is an output view of acc's element count.
        unsafe { ga.store(&acc) };
    }
    if let Some(gbv) = gb {
        // grad_b[.., p, j] = sum_i a[.., i, p] * dZ[.., i, j], summed over b's broadcast batch.
        let oa = operand(a, batch, "a")?;
        let acc_batch = broadcast(&gbv.shape[..gbv.ndim() - 2], &compact_strides(&gbv.shape)[..gbv.ndim() - 2], batch);
        let mut acc = vec![0.0f64; numel(&gbv.shape)];
        walk(batch, [&acc_batch, &oa.batch, dzb], |[bb, ab, db]| {
            for p in 0..k {
                for j in 0..n {
                    let mut s = 0.0f64;
                    for i in 0..m {
                        // SAFETY: within a's validated shape.
                        s += unsafe { a.read(ab + i * oa.row + p * oa.col) } as f64 * dz[(db + i * n + j) as usize];
                    }
                    acc[(bb + p * n + j) as usize] += s;
                }
            }
        });
        // SAFETY: gbv is an output view of acc's element count.
        unsafe { gbv.store(&acc) };
    }
    if let Some(gc) = gbias {
        // grad_bias = reduce_to(dZ, bias.shape): grad_bias's shape is the bias's.
        let acc_s = broadcast(&gc.shape, &compact_strides(&gc.shape), shape);
        let mut acc = vec![0.0f64; numel(&gc.shape)];
        walk(shape, [&acc_s, &dz_strides], |[c, d]| acc[c as usize] += dz[d as usize]);
        // SAFETY: gc is an output view of acc's element count.
        unsafe { gc.store(&acc) };
    }
    Ok(())
}

//! The four kernels of ABI 1 (docs/ops.md) on borrowed views. The registry validates
//! every call (shapes, dtypes, devices, overlap) and its refusal comes back as an Error.
//! Calls use the plugin's default stream; CPU kernels have finished on return, device
//! kernels are ordered before later copies and frees on that stream.
use std::ptr;

use dlfuse_sys as sys;

use crate::error::{check, Result};
use crate::registry::Registry;
use crate::tensor::{TensorView, TensorViewMut};

/// The activations of add_mul_activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    Identity,
    Relu,
    Sigmoid,
    Tanh,
    GeluErf,
    GeluTanh,
    Silu,
}

impl Activation {
    pub const ALL: [Activation; 7] = [
        Activation::Identity,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Silu,
    ];
    pub fn raw(self) -> sys::dlfuse_activation_t {
        match self {
            Activation::Identity => sys::DLFUSE_ACT_IDENTITY,
            Activation::Relu => sys::DLFUSE_ACT_RELU,
            Activation::Sigmoid => sys::DLFUSE_ACT_SIGMOID,
            Activation::Tanh => sys::DLFUSE_ACT_TANH,
            Activation::GeluErf => sys::DLFUSE_ACT_GELU_ERF,
            Activation::GeluTanh => sys::DLFUSE_ACT_GELU_TANH,
            Activation::Silu => sys::DLFUSE_ACT_SILU,
        }
    }
}

/// An optional output's C view (None: NULL).
fn opt_dl(t: &Option<&mut TensorViewMut<'_>>) -> Option<sys::DLTensor> {
    t.as_ref().map(|v| v.layout.dl())
}

fn opt_ptr(t: &mut Option<sys::DLTensor>) -> *mut sys::DLTensor {
    t.as_mut().map_or(ptr::null_mut(), |t| t as *mut _)
}

impl Registry {
    /// out = relu(a @ b + bias). `allow_tf32 = false` is exact float32.
    pub fn matmul_add_relu(
        &self,
        a: &TensorView<'_>,
        b: &TensorView<'_>,
        bias: &TensorView<'_>,
        out: &mut TensorViewMut<'_>,
        allow_tf32: bool,
    ) -> Result<()> {
        let (a, b, bias, mut o) = (a.layout.dl(), b.layout.dl(), bias.layout.dl(), out.layout.dl());
        // SAFETY: every DLTensor describes memory its view borrows for this call.
        check(unsafe {
            sys::dlfuse_matmul_add_relu(self.as_raw(), &a, &b, &bias, &mut o, allow_tf32 as i32, ptr::null_mut())
        })
    }

    /// Gradients of matmul_add_relu from `grad_out` and the forward's a, b, out. Absent
    /// gradients are not computed.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_add_relu_backward(
        &self,
        grad_out: &TensorView<'_>,
        a: &TensorView<'_>,
        b: &TensorView<'_>,
        out: &TensorView<'_>,
        grad_a: Option<&mut TensorViewMut<'_>>,
        grad_b: Option<&mut TensorViewMut<'_>>,
        grad_bias: Option<&mut TensorViewMut<'_>>,
        allow_tf32: bool,
    ) -> Result<()> {
        let (g, a, b, o) = (grad_out.layout.dl(), a.layout.dl(), b.layout.dl(), out.layout.dl());
        let (mut ga, mut gb, mut gc) = (opt_dl(&grad_a), opt_dl(&grad_b), opt_dl(&grad_bias));
        // SAFETY: as in matmul_add_relu; absent outputs are NULL.
        check(unsafe {
            sys::dlfuse_matmul_add_relu_backward(
                self.as_raw(),
                &g,
                &a,
                &b,
                &o,
                opt_ptr(&mut ga),
                opt_ptr(&mut gb),
                opt_ptr(&mut gc),
                allow_tf32 as i32,
                ptr::null_mut(),
            )
        })
    }

    /// out = act(x + bias + multiplier * y), NumPy broadcasting.
    pub fn add_mul_activation(
        &self,
        x: &TensorView<'_>,
        y: &TensorView<'_>,
        bias: &TensorView<'_>,
        multiplier: f64,
        activation: Activation,
        out: &mut TensorViewMut<'_>,
    ) -> Result<()> {
        let (x, y, bias, mut o) = (x.layout.dl(), y.layout.dl(), bias.layout.dl(), out.layout.dl());
        // SAFETY: as in matmul_add_relu.
        check(unsafe {
            sys::dlfuse_add_mul_activation(self.as_raw(), &x, &y, &bias, multiplier, activation.raw(), &mut o, ptr::null_mut())
        })
    }

    /// add_mul_activation in place: `x` is overwritten with the result (the one overlap
    /// the op allows). Keep a copy of x if the backward needs it.
    pub fn add_mul_activation_in_place(
        &self,
        x: &mut TensorViewMut<'_>,
        y: &TensorView<'_>,
        bias: &TensorView<'_>,
        multiplier: f64,
        activation: Activation,
    ) -> Result<()> {
        let (mut xo, y, bias) = (x.layout.dl(), y.layout.dl(), bias.layout.dl());
        let p: *mut sys::DLTensor = &mut xo;
        // SAFETY: x's view is exclusively borrowed; C reads and writes it through one struct.
        check(unsafe {
            sys::dlfuse_add_mul_activation(self.as_raw(), p, &y, &bias, multiplier, activation.raw(), p, ptr::null_mut())
        })
    }

    /// Gradients of add_mul_activation from `grad_out` and the forward's inputs.
    #[allow(clippy::too_many_arguments)]
    pub fn add_mul_activation_backward(
        &self,
        grad_out: &TensorView<'_>,
        x: &TensorView<'_>,
        y: &TensorView<'_>,
        bias: &TensorView<'_>,
        multiplier: f64,
        activation: Activation,
        grad_x: Option<&mut TensorViewMut<'_>>,
        grad_y: Option<&mut TensorViewMut<'_>>,
        grad_bias: Option<&mut TensorViewMut<'_>>,
    ) -> Result<()> {
        let (g, x, y, b) = (grad_out.layout.dl(), x.layout.dl(), y.layout.dl(), bias.layout.dl());
        let (mut gx, mut gy, mut gb) = (opt_dl(&grad_x), opt_dl(&grad_y), opt_dl(&grad_bias));
        // SAFETY: as in matmul_add_relu_backward.
        check(unsafe {
            sys::dlfuse_add_mul_activation_backward(
                self.as_raw(),
                &g,
                &x,
                &y,
                &b,
                multiplier,
                activation.raw(),
                opt_ptr(&mut gx),
                opt_ptr(&mut gy),
                opt_ptr(&mut gb),
                ptr::null_mut(),
            )
        })
    }
}

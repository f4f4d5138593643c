//! Reading a kernel call: the tensors (checked for what this plugin serves: float32 on
//! cpu:0) and the attributes, which the registry passes complete for the ops of ABI 1.
use dlfuse_sys::*;

use crate::guard::{invalid, Failure};
use crate::strided::Strided;

pub struct Call {
    pub inputs: Vec<Strided>,
    /// None where the host passed NULL (an unwanted gradient).
    pub outputs: Vec<Option<Strided>>,
    attrs: Vec<dlfuse_attr_t>,
}

/// A dtype as the registry's messages spell it (float32, bfloat16, ...).
fn dtype_name(t: DLDataType) -> String {
    let base = match t.code {
        dlfuse_sys::kDLInt => "int".to_string(),
        dlfuse_sys::kDLUInt => "uint".to_string(),
        dlfuse_sys::kDLFloat => "float".to_string(),
        dlfuse_sys::kDLBfloat => "bfloat".to_string(),
        dlfuse_sys::kDLBool => "bool".to_string(),
        dlfuse_sys::kDLComplex => "complex".to_string(),
        code => format!("code{}_", code),
    };
    let lanes = if t.lanes == 1 { String::new() } else { format!("x{}", t.lanes) };
    format!("{}{}{}", base, t.bits, lanes)
}

/// A device as the registry's messages spell it (cpu:0, cuda:1, ...).
fn device_name(d: DLDevice) -> String {
    let kind = match d.device_type {
        dlfuse_sys::kDLCPU => "cpu".to_string(),
        dlfuse_sys::kDLCUDA => "cuda".to_string(),
        dlfuse_sys::kDLOpenCL => "opencl".to_string(),
        other => format!("device_type_{}", other),
    };
    format!("{}:{}", kind, d.device_id)
}

fn check_tensor(t: &DLTensor, what: &str) -> Result<(), Failure> {
    if t.dtype != (DLDataType { code: kDLFloat, bits: 32, lanes: 1 }) {
        return Err(invalid(format!("{}: expected dtype float32, got {}", what, dtype_name(t.dtype))));
    }
    if t.device.device_type != kDLCPU || t.device.device_id != 0 {
        return Err(invalid(format!("{}: expected device cpu:0, got {}", what, device_name(t.device))));
    }
    Ok(())
}

impl Call {
    /// # Safety
    /// `args` is what the registry passed to a kernel.
    pub unsafe fn read(
        args: *const dlfuse_kernel_args_t,
        op: &str,
        num_inputs: usize,
        num_outputs: usize,
    ) -> Result<Call, Failure> {
        // SAFETY: the caller's contract: args and every pointer in it are the registry's.
        unsafe { Self::read_unchecked(args, op, num_inputs, num_outputs) }
    }

    unsafe fn read_unchecked(
        args: *const dlfuse_kernel_args_t,
        op: &str,
        num_inputs: usize,
        num_outputs: usize,
    ) -> Result<Call, Failure> {
        #![allow(unsafe_op_in_unsafe_fn)]
        if args.is_null() {
            return Err(invalid(format!("{}: args: expected a dlfuse_kernel_args_t, got NULL", op)));
        }
        let a = &*args;
        if a.num_inputs as usize != num_inputs || a.num_outputs as usize != num_outputs {
            return Err(invalid(format!(
                "{}: num_inputs, num_outputs: expected {} and {}, got {} and {}",
                op, num_inputs, num_outputs, a.num_inputs, a.num_outputs
            )));
        }
        if a.inputs.is_null() || a.outputs.is_null() {
            return Err(invalid(format!(
                "{}: inputs, outputs: expected two arrays, got {:?} and {:?}",
                op, a.inputs, a.outputs
            )));
        }
        let mut inputs = Vec::with_capacity(num_inputs);
        for i in 0..num_inputs {
            let t = *a.inputs.add(i);
            if t.is_null() {
                return Err(invalid(format!("{}: input {}: expected a DLTensor, got NULL", op, i)));
            }
            check_tensor(&*t, &format!("{} input {}", op, i))?;
            inputs.push(Strided::from_dl(t));
        }
        let mut outputs = Vec::with_capacity(num_outputs);
        for i in 0..num_outputs {
            let t = *a.outputs.add(i);
            if t.is_null() {
                outputs.push(None);
            } else {
                check_tensor(&*t, &format!("{} output {}", op, i))?;
                outputs.push(Some(Strided::from_dl(t)));
            }
        }
        let attrs = if a.num_attrs > 0 && !a.attrs.is_null() {
            std::slice::from_raw_parts(a.attrs, a.num_attrs as usize).to_vec()
        } else {
            Vec::new()
        };
        Ok(Call { inputs, outputs, attrs })
    }

    fn attr(&self, key: i32) -> Option<&dlfuse_attr_t> {
        self.attrs.iter().find(|a| a.key == key)
    }

    pub fn activation(&self) -> Result<i32, Failure> {
        match self.attr(DLFUSE_ATTR_ACTIVATION) {
            // SAFETY: the type tag says which member is set.
            Some(a) if a.type_ == DLFUSE_ATTR_INT64 => {
                let v = unsafe { a.value.i64_ };
                if (0..DLFUSE_ACT_COUNT as i64).contains(&v) {
                    Ok(v as i32)
                } else {
                    Err(invalid(format!("ACTIVATION: expected 0..{}, got {}", DLFUSE_ACT_COUNT - 1, v)))
                }
            }
            Some(a) => Err(invalid(format!("ACTIVATION: expected an INT64 attribute, got type {}", a.type_))),
            None => Err(invalid("ACTIVATION: expected an INT64 attribute, got none".to_string())),
        }
    }

    pub fn multiplier(&self) -> f64 {
        match self.attr(DLFUSE_ATTR_MULTIPLIER) {
            // SAFETY: the type tag says which member is set.
            Some(a) if a.type_ == DLFUSE_ATTR_FLOAT64 => unsafe { a.value.f64_ },
            _ => 1.0,
        }
    }
}

/// A kernel's entry: reads the call and runs `body` under the panic guard.
///
/// # Safety
/// `args` is what the registry passed to a kernel (or NULL).
pub unsafe fn run_kernel(
    args: *const dlfuse_kernel_args_t,
    op: &str,
    num_inputs: usize,
    num_outputs: usize,
    body: impl FnOnce(&Call) -> Result<(), Failure>,
) -> dlfuse_status_t {
    // SAFETY: non-NULL args is the registry's.
    let (err, err_size) = if args.is_null() { (std::ptr::null_mut(), 0) } else { unsafe { ((*args).err, (*args).err_size) } };
    crate::guard::run(err, err_size, || {
        // SAFETY: the caller's contract.
        let call = unsafe { Call::read(args, op, num_inputs, num_outputs)? };
        body(&call)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DLDataType, device: DLDevice) -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device,
            ndim: 0,
            dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    /// A tensor this plugin does not serve is refused naming it, the expected and the
    /// actual value in the registry's spelling.
    #[test]
    fn refusals_name_the_expected_and_the_actual_value() {
        let cpu = DLDevice { device_type: kDLCPU, device_id: 0 };
        let bf16 = tensor(DLDataType { code: kDLBfloat, bits: 16, lanes: 1 }, cpu);
        let e = check_tensor(&bf16, "add_mul_activation input 1").err().unwrap();
        assert_eq!(e.message, "add_mul_activation input 1: expected dtype float32, got bfloat16");
        let f32_cuda = tensor(DLDataType { code: kDLFloat, bits: 32, lanes: 1 }, DLDevice { device_type: kDLCUDA, device_id: 1 });
        let e = check_tensor(&f32_cuda, "out").err().unwrap();
        assert_eq!(e.message, "out: expected device cpu:0, got cuda:1");
        assert_eq!(dtype_name(DLDataType { code: kDLFloat, bits: 16, lanes: 2 }), "float16x2");
        // SAFETY: NULL args is refused before anything is read.
        let e = unsafe { Call::read(std::ptr::null(), "matmul_add_relu", 3, 1) }.err().unwrap();
        assert_eq!(e.message, "matmul_add_relu: args: expected a dlfuse_kernel_args_t, got NULL");
    }
}

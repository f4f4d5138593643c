//! float32 tensors as the host hands them: a base address (data + byte_offset), a shape
//! and strides in elements (compact row-major when the view has none), and the loops that
//! walk several of them in step, with NumPy broadcasting.
use dlfuse_sys::DLTensor;

pub struct Strided {
    /// Address of element [0, ..., 0], computed in integers: data may be NULL with a
    /// non-zero byte_offset when the tensor is empty.
    base: usize,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
}

pub fn compact_strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc *= shape[d].max(1);
    }
    s
}

pub fn numel(shape: &[i64]) -> usize {
    shape.iter().map(|&d| d as usize).product()
}

impl Strided {
    /// # Safety
    /// `t` points to a valid DLTensor whose shape (and strides, if not NULL) hold `ndim`
    /// entries; the registry has validated it.
    pub unsafe fn from_dl(t: *const DLTensor) -> Strided {
        // SAFETY: the caller's contract.
        let t = unsafe { &*t };
        let nd = t.ndim.max(0) as usize;
        // SAFETY: shape and strides hold ndim entries.
        let shape = if nd == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(t.shape, nd) }.to_vec() };
        let strides = if t.strides.is_null() || nd == 0 {
            compact_strides(&shape)
        } else {
            unsafe { std::slice::from_raw_parts(t.strides, nd) }.to_vec()
        };
        Strided { base: (t.data as usize).wrapping_add(t.byte_offset as usize), shape, strides }
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// # Safety
    /// `off` (in elements) addresses an element of the view.
    pub unsafe fn read(&self, off: i64) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { *((self.base as isize + off as isize * 4) as *const f32) }
    }

    /// # Safety
    /// `off` addresses an element of an output view.
    pub unsafe fn write(&self, off: i64, v: f32) {
        // SAFETY: the caller's contract.
        unsafe { *((self.base as isize + off as isize * 4) as *mut f32) = v };
    }

    /// Strides of this view read along `target` (the broadcast shape, aligned at the
    /// right): 0 along dims it lacks or has size 1.
    pub fn broadcast_strides(&self, target: &[i64]) -> Vec<i64> {
        broadcast(&self.shape, &self.strides, target)
    }

    /// Stores a float64 accumulator laid out compactly in this view's shape.
    ///
    /// # Safety
    /// This is an output view and `acc` has its element count.
    pub unsafe fn store(&self, acc: &[f64]) {
        let compact = compact_strides(&self.shape);
        walk(&self.shape, [&compact, &self.strides], |[c, o]| unsafe { self.write(o, acc[c as usize] as f32) });
    }
}

pub fn broadcast(shape: &[i64], strides: &[i64], target: &[i64]) -> Vec<i64> {
    assert!(shape.len() <= target.len(), "shape {:?} does not broadcast to {:?}", shape, target);
    let lead = target.len() - shape.len();
    (0..target.len())
        .map(|d| if d < lead || shape[d - lead] == 1 { 0 } else { strides[d - lead] })
        .collect()
}

/// Calls `f` with the element offsets of N views at every index of `shape`, row-major.
pub fn walk<const N: usize>(shape: &[i64], strides: [&[i64]; N], mut f: impl FnMut([i64; N])) {
    if shape.iter().any(|&s| s <= 0) {
        return;
    }
    let nd = shape.len();
    let mut idx = vec![0i64; nd];
    let mut offs = [0i64; N];
    loop {
        f(offs);
        let mut d = nd;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                offs[k] += strides[k][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..N {
                offs[k] -= strides[k][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

// C = epilogue(sum over r < R of A_r @ B_r): the plugin's one GEMM.
//
// The host puts the tile constants before this file: BM x BN outputs per workgroup, k-steps
// of BK, TM x TN outputs per invocation (TM, TN, BK multiples of 4), GROUP (block_of), and
// VEC_A / VEC_B:
// A's rows (B's rows) are contiguous and 16-byte aligned, read as vec4 (A4 / B4 view the
// same buffers as A / B). Operands are strided views, so transposed operands are swapped
// strides: A(m, k) = A[offA + m*sam + k*sak], B(k, n) = B[offB + k*sbk + n*sbn].
//
// Epilogue, in float: v = sum + bias(m, n) (flags & 1) + residual(m, n) (flags & 2); v is
// stored to PRE (flags & 4) and act_fwd(v, act) to C, each rounded once. An invocation reads
// the residual before it writes C, so C may be the residual itself (in place).
//
// Batches: workgroup z is one C matrix. With a table (prm[26] != 0), row z at
// 32 + z * (4 + 2R) is [offC, offBias, offRes, offPre, (offA, offB) x R], added to the base
// offsets: the R products are summed into one C, which is how a backward reduces a
// broadcast operand's gradient over batch dims without atomics or a second pass.
//
// prm: M N K R flags act | A@6: off sam sak, 0 | B@10: off sbk sbn, 0 | C@14 | bias@17 | res@20 |
// pre@23 (off, row stride, column stride each) | has_table@26 | table@32.

// The parameter block: storage (a batch table can outgrow a uniform block), read-only so
// the compiler may cache its words.
@group(0) @binding(0) var<storage, read> prm: array<i32>;
fn pr(i: i32) -> i32 { return prm[i]; }

const NTX: i32 = BN / TN;  // invocations along n
const NTY: i32 = BM / TM;  // invocations along m
const NT: i32 = NTX * NTY;

// read_write though only read: a view of the same WGPUBuffer may be written in the same
// dispatch (C), and WebGPU refuses a buffer bound both read-only and writable there.
@group(0) @binding(1) var<storage, read_write> A: array<T>;
@group(0) @binding(2) var<storage, read_write> A4: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> B: array<T>;
@group(0) @binding(4) var<storage, read_write> B4: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> C: array<T>;
@group(0) @binding(6) var<storage, read_write> BIAS: array<T>;
@group(0) @binding(7) var<storage, read_write> RES: array<T>;
@group(0) @binding(8) var<storage, read_write> PRE: array<T>;

// Tiles in float, k-major: As[buf][k][m], Bs[buf][k][n], four m (n) per vec4. Two buffers:
// the next k-step's tile is stored into one while the other is read, one barrier a step.
const AT: i32 = BK * BM / 4;
const BT: i32 = BK * BN / 4;
var<workgroup> As: array<vec4<f32>, 2 * AT>;
var<workgroup> Bs: array<vec4<f32>, 2 * BT>;
// Loop bounds the barriers depend on, made workgroup-uniform (prm is storage memory).
var<workgroup> bounds: array<i32, 2>;

// The sizes and operand strides the k-loop reads, copied from prm once per invocation.
var<private> gM: i32;
var<private> gN: i32;
var<private> gK: i32;
var<private> sam: i32;
var<private> sak: i32;
var<private> sbk: i32;
var<private> sbn: i32;

// Per invocation, the tile elements it moves each k-step: element l = tid + j * NT of the
// tile for j < these counts (l past the tile's end is skipped).
const A_V: i32 = (BM * BK / 4 + NT - 1) / NT;
const A_S: i32 = (BM * BK + NT - 1) / NT;
const B_V: i32 = (BK * BN / 4 + NT - 1) / NT;
const B_S: i32 = (BK * BN + NT - 1) / NT;

// A's offset for product r of this batch (the table adds one per product).
fn a_off(trow: i32, r: i32) -> i32 {
  if (prm[26] != 0) { return prm[6] + prm[trow + 4 + 2 * r]; }
  return prm[6];
}
fn b_off(trow: i32, r: i32) -> i32 {
  if (prm[26] != 0) { return prm[10] + prm[trow + 5 + 2 * r]; }
  return prm[10];
}

// Tile element l of A as a vec4 along k (VEC_A): (m, k..k+3), zero outside the matrix.
fn fetch_a4(l: i32, m0: i32, k0: i32, offA: i32) -> vec4<f32> {
  let m = l / (BK / 4);
  let gm = m0 + m;
  let gk = k0 + (l % (BK / 4)) * 4;
  if (l < BM * BK / 4 && gm < gM && gk < gK) { return vec4<f32>(A4[(offA + gm * sam + gk) / 4]); }
  return vec4<f32>(0.0);
}
fn put_a4(l: i32, buf: i32, v: vec4<f32>) {
  if (l >= BM * BK / 4) { return; }
  let m = l / (BK / 4);
  let kq = (l % (BK / 4)) * 4;
  let base = buf * AT + m / 4;
  let c = m % 4;
  As[base + (kq + 0) * (BM / 4)][c] = v.x;
  As[base + (kq + 1) * (BM / 4)][c] = v.y;
  As[base + (kq + 2) * (BM / 4)][c] = v.z;
  As[base + (kq + 3) * (BM / 4)][c] = v.w;
}
// Scalar A: consecutive invocations walk A's contiguous dim (coalesced reads).
fn a_mk(l: i32) -> vec2<i32> {
  if (sam == 1) { return vec2<i32>(l % BM, l / BM); }
  return vec2<i32>(l / BK, l % BK);
}
fn fetch_a(l: i32, m0: i32, k0: i32, offA: i32) -> f32 {
  let mk = a_mk(l);
  let gm = m0 + mk.x;
  let gk = k0 + mk.y;
  if (l < BM * BK && gm < gM && gk < gK) { return f32(A[offA + gm * sam + gk * sak]); }
  return 0.0;
}
fn put_a(l: i32, buf: i32, v: f32) {
  if (l >= BM * BK) { return; }
  let mk = a_mk(l);
  As[buf * AT + mk.y * (BM / 4) + mk.x / 4][mk.x % 4] = v;
}
// Tile element l of B as a vec4 along n (VEC_B): (k, n..n+3).
fn fetch_b4(l: i32, n0: i32, k0: i32, offB: i32) -> vec4<f32> {
  let gk = k0 + l / (BN / 4);
  let gn = n0 + (l % (BN / 4)) * 4;
  if (l < BK * BN / 4 && gk < gK && gn < gN) { return vec4<f32>(B4[(offB + gk * sbk + gn) / 4]); }
  return vec4<f32>(0.0);
}
fn put_b4(l: i32, buf: i32, v: vec4<f32>) {
  if (l < BK * BN / 4) { Bs[buf * BT + l] = v; }  // (k, n / 4) is l itself
}
fn b_kn(l: i32) -> vec2<i32> {
  if (sbn == 1) { return vec2<i32>(l / BN, l % BN); }
  return vec2<i32>(l % BK, l / BK);
}
fn fetch_b(l: i32, n0: i32, k0: i32, offB: i32) -> f32 {
  let kn = b_kn(l);
  let gk = k0 + kn.x;
  let gn = n0 + kn.y;
  if (l < BK * BN && gk < gK && gn < gN) { return f32(B[offB + gk * sbk + gn * sbn]); }
  return 0.0;
}
fn put_b(l: i32, buf: i32, v: f32) {
  if (l >= BK * BN) { return; }
  let kn = b_kn(l);
  Bs[buf * BT + kn.x * (BN / 4) + kn.y / 4][kn.y % 4] = v;
}

// The block (row, column) of C this workgroup computes. Workgroups run in about their
// linear order, so they go down GROUP block rows before moving to the next block column:
// the A rows and B columns the GPU works on at once stay few enough to share the L2 cache.
fn block_of(wg: vec3<u32>, nwg: vec3<u32>) -> vec2<i32> {
  let nx = i32(nwg.x);
  let pid = i32(wg.y) * nx + i32(wg.x);
  let per_group = GROUP * nx;
  let first_row = pid / per_group * GROUP;
  let rows = min(i32(nwg.y) - first_row, GROUP);
  let in_group = pid % per_group;
  return vec2<i32>(first_row + in_group % rows, in_group / rows);
}

@compute @workgroup_size(NT)
fn gemm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lidx: u32) {
  let tid = i32(lidx);
  if (tid == 0) {
    bounds[0] = prm[2];
    bounds[1] = prm[3];
  }
  let K = workgroupUniformLoad(&bounds[0]);
  let R = workgroupUniformLoad(&bounds[1]);
  gM = prm[0];
  gN = prm[1];
  gK = K;
  sam = prm[7];
  sak = prm[8];
  sbk = prm[11];
  sbn = prm[12];
  let bz = i32(wg.z);
  let blk = block_of(wg, nwg);
  let m0 = blk.x * BM;
  let n0 = blk.y * BN;
  let trow = 32 + bz * (4 + 2 * R);
  let tx = tid % NTX;
  let ty = tid / NTX;

  // The k-steps of all R products in one sequence: step s is product s / KT, k0 = s % KT * BK.
  let KT = (K + BK - 1) / BK;
  let S = R * KT;
  // The next step's tile elements, staged in registers while the current one is computed.
  var ra4: array<vec4<f32>, A_V>;
  var ra: array<f32, A_S>;
  var rb4: array<vec4<f32>, B_V>;
  var rb: array<f32, B_S>;

  // The TM x TN accumulators, acc_<i>_<j> (a vec4 of four columns): row
  // (i / 4 * NTY + ty) * 4 + i % 4, columns (j * NTX + tx) * 4 + 0..3, so the vec4 reads of
  // one k step by neighbouring invocations are neighbouring 16 bytes. The host writes the
  // declarations, the multiply-adds and the stores out in full (no array: registers).
  //@ACC_DECL@
  for (var s = -1; s < S; s++) {
    let cur = (s + 2) % 2;  // s = -1 only loads the first tile
    let nxt = s + 1;
    if (nxt < S) {
      let r = nxt / KT;
      let k0 = (nxt % KT) * BK;
      let offA = a_off(trow, r);
      let offB = b_off(trow, r);
      if (VEC_A) {
        for (var j = 0; j < A_V; j++) { ra4[j] = fetch_a4(tid + j * NT, m0, k0, offA); }
      } else {
        for (var j = 0; j < A_S; j++) { ra[j] = fetch_a(tid + j * NT, m0, k0, offA); }
      }
      if (VEC_B) {
        for (var j = 0; j < B_V; j++) { rb4[j] = fetch_b4(tid + j * NT, n0, k0, offB); }
      } else {
        for (var j = 0; j < B_S; j++) { rb[j] = fetch_b(tid + j * NT, n0, k0, offB); }
      }
    }
    if (s >= 0) {
      let abase = cur * AT;
      let bbase = cur * BT;
      for (var k = 0; k < BK; k++) {
        let ak = abase + k * (BM / 4) + ty;
        let bk = bbase + k * (BN / 4) + tx;
        //@MMA@
      }
    }
    if (nxt < S) {
      // Buffer nxt % 2 was last read in step s - 1, which every invocation has finished
      // (the barrier below closed it).
      let buf = nxt % 2;
      if (VEC_A) {
        for (var j = 0; j < A_V; j++) { put_a4(tid + j * NT, buf, ra4[j]); }
      } else {
        for (var j = 0; j < A_S; j++) { put_a(tid + j * NT, buf, ra[j]); }
      }
      if (VEC_B) {
        for (var j = 0; j < B_V; j++) { put_b4(tid + j * NT, buf, rb4[j]); }
      } else {
        for (var j = 0; j < B_S; j++) { put_b(tid + j * NT, buf, rb[j]); }
      }
    }
    workgroupBarrier();
  }

  var offs = vec4<i32>(prm[14], prm[17], prm[20], prm[23]);  // C, bias, residual, pre
  if (prm[26] != 0) { offs += vec4<i32>(prm[trow], prm[trow + 1], prm[trow + 2], prm[trow + 3]); }
  //@EPILOGUE@
}

// Stores row m, columns nb..nb+3 of the product through the epilogue (bounds checked).
fn store4(m: i32, nb: i32, acc: vec4<f32>, offs: vec4<i32>) {
  if (m >= prm[0]) { return; }
  let flags = prm[4];
  let act = prm[5];
  for (var c = 0; c < 4; c++) {
    let n = nb + c;
    if (n >= prm[1]) { return; }
    var v = acc[c];
    if ((flags & 1) != 0) { v += f32(BIAS[offs.y + m * prm[18] + n * prm[19]]); }
    if ((flags & 2) != 0) { v += f32(RES[offs.z + m * prm[21] + n * prm[22]]); }
    if ((flags & 4) != 0) { PRE[offs.w + m * prm[24] + n * prm[25]] = T(v); }
    C[offs.x + m * prm[15] + n * prm[16]] = T(act_fwd(v, act));
  }
}

// out[..., i] = x[..., 0] op ... op x[..., i] along the last dim (OP 0: cumulative_sum, 1:
// cumulative_prod). Accumulates in the output's compute type: int64 for integer and bool inputs,
// float32 for float16. A row is cut into `chunks` chunks of `chunk_len` elements, and an invocation
// walks one chunk in order: llvmpipe ends any loop after 65535 iterations, so a longer row takes three
// passes (PHASE, constant 1): 1: each chunk's total into scratch; 2: one invocation per row turns its
// totals into the running value before each chunk; 0: each chunk walks its elements from that value
// (a row of one chunk: phase 0 alone, from the identity).
// params: [n_outer, row_len, x_offset, x_stride, out_offset, out_stride, outer shape, x outer strides,
// out outer strides]
layout(local_size_x = 64) in;
layout(constant_id = 0) const int OP = 0;
layout(constant_id = 1) const int PHASE = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr, scratch_addr; uint rows, chunks, chunk_len; } pc;

#if defined(O_IS_FLOAT)
#define SCRATCH BufF32
#else
#define SCRATCH BufI64
#endif

O_T combine(O_T acc, O_T v) { return OP == 0 ? acc + v : acc * v; }

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], row_len = p.v[1], x_stride = p.v[3], out_stride = p.v[5];
    SCRATCH scratch = SCRATCH(pc.scratch_addr);
    uint items = PHASE == 2 ? pc.rows : pc.rows * pc.chunks;
    for (uint item = gl_GlobalInvocationID.x; item < items; item += gl_NumWorkGroups.x * 64u) {
        if (PHASE == 2) {  // exclusive running values of the row's chunk totals, in place
            O_T acc = O_T(OP == 0 ? 0 : 1);
            for (uint c = 0u; c < pc.chunks; c++) {
                O_T total = scratch.v[item * pc.chunks + c];
                scratch.v[item * pc.chunks + c] = acc;
                acc = combine(acc, total);
            }
            continue;
        }
        uint row = item / pc.chunks, chunk = item % pc.chunks;
        int start = int(chunk * pc.chunk_len), stop = min(row_len, start + int(pc.chunk_len));
        int x_at = p.v[2] + strided_offset(p, 6, 6 + n_outer, n_outer, row);
        int out_at = p.v[4] + strided_offset(p, 6, 6 + 2 * n_outer, n_outer, row);
        O_T acc = PHASE == 0 && pc.chunks > 1u ? scratch.v[item] : O_T(OP == 0 ? 0 : 1);
        for (int i = start; i < stop; i++) {
            acc = combine(acc, O_T(A_LOAD(A_BUF(pc.a_addr).v[x_at + i * x_stride])));
            if (PHASE == 0) O_BUF(pc.out_addr).v[out_at + i * out_stride] = O_STORE(acc);
        }
        if (PHASE == 1) scratch.v[item] = acc;
    }
}

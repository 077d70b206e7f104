// main() of the elementwise shaders (copy, unary, binary, where).  The including shader declares
// OPERANDS (output first), a push block with params_addr, n (elements) and run, and
// `void element(int at[OPERANDS])`, which handles the element at those operand offsets.
// Params: [ndim, shape..., then per operand: offset, strides...].
//
// An invocation handles up to `run` consecutive elements of the innermost dim: it pays the
// divisions and parameter reads that locate its first element once, then steps by the innermost
// strides.  The host picks run = 1 on GPUs (neighbouring invocations touch neighbouring
// elements) and a longer run on CPU devices, where that index arithmetic dominates.
void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    uint inner = ndim > 0 ? uint(p.v[ndim]) : 1u;
    uint runs_per_row = (inner + pc.run - 1u) / pc.run;
    uint items = pc.n / inner * runs_per_row;
    int inner_stride[OPERANDS];
    for (int k = 0; k < OPERANDS; k++) inner_stride[k] = ndim > 0 ? p.v[1 + ndim + k * (ndim + 1) + ndim] : 0;
    for (uint item = gl_GlobalInvocationID.x; item < items; item += gl_NumWorkGroups.x * WG) {
        uint start = (item % runs_per_row) * pc.run;
        uint rest = item / runs_per_row;  // the row: flat index over every dim but the innermost
        int at[OPERANDS];
        for (int k = 0; k < OPERANDS; k++) at[k] = p.v[1 + ndim + k * (ndim + 1)] + int(start) * inner_stride[k];
        for (int d = ndim - 2; d >= 0; d--) {
            uint size = uint(p.v[1 + d]);
            uint index = d > 0 ? rest % size : rest;
            rest = d > 0 ? rest / size : 0u;
            for (int k = 0; k < OPERANDS; k++) at[k] += int(index) * p.v[2 + ndim + k * (ndim + 1) + d];
        }
        uint count = min(pc.run, inner - start);
        for (uint r = 0u; r < count; r++) {
            element(at);
            for (int k = 0; k < OPERANDS; k++) at[k] += inner_stride[k];
        }
    }
}

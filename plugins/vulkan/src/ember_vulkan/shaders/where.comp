// out = cond ? b : c, on strided views already broadcast to out's shape.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, c_addr, params_addr; uint n; } pc;

void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * WG) {
        bool cond = A_LOAD(A_BUF(pc.a_addr).v[operand_offset(p, ndim, 1, i)]);
        int o = operand_offset(p, ndim, 0, i);
        // two plain stores: a select over 8/16-bit values would need shaderInt8 / shaderFloat16
        if (cond) {
            O_BUF(pc.out_addr).v[o] = B_BUF(pc.b_addr).v[operand_offset(p, ndim, 2, i)];
        } else {
            O_BUF(pc.out_addr).v[o] = C_BUF(pc.c_addr).v[operand_offset(p, ndim, 3, i)];
        }
    }
}

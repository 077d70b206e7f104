// out = the insertion points of x2's elements into the sorted 1-d x1 (side left: the first i with
// x1[i] >= v; right: the first with x1[i] > v), compared by sort keys (sort_key.glsl), which gives
// numpy's order with NaN last. out (int64) and x2 are walked as elementwise operands.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {  // the elementwise operands (out, x2), then x1
    uint64_t out_addr, b_addr, params_addr;
    uint n, run;
    uint64_t a_addr;
    uint x1_len, right;
    int x1_offset, x1_stride;
} pc;

#include "sort_key.glsl"

#define OPERANDS 2
void element(int at[OPERANDS]) {
    uint64_t key = sort_key(A_LOAD(A_BUF(pc.b_addr).v[at[1]]));
    uint lo = 0u, hi = pc.x1_len;
    while (lo < hi) {
        uint mid = (lo + hi) / 2u;
        uint64_t probe = sort_key(A_LOAD(A_BUF(pc.a_addr).v[pc.x1_offset + int(mid) * pc.x1_stride]));
        if (probe < key || (pc.right != 0u && probe == key)) lo = mid + 1u;
        else hi = mid;
    }
    BufI64(pc.out_addr).v[at[0]] = int64_t(lo);
}

#include "elementwise_walk.glsl"

// The bitonic network over each row's `span` (a power of two) (key, index) pairs, ordered by key then
// index: a total order, so the result is the stable sort's. Stage (k, j) compares element i with
// i ^ j, ascending where i's position in its row has bit k clear. LOCAL 0: one stage (k, j) over global memory, an invocation per
// pair. LOCAL 1: a workgroup loads a block of 2 * 256 pairs into shared memory and runs every stage
// k in [k_lo, k_hi], j from min(k / 2, j_hi) down to 1 there (those stay inside the block).
layout(local_size_x = 256) in;
layout(constant_id = 0) const int LOCAL = 0;
layout(push_constant) uniform Push { uint64_t keys_addr, index_addr; uint pairs, k_lo, k_hi, j_hi, span; } pc;

#define BLOCK 512u
shared uint64_t s_key[BLOCK];
shared uint s_index[BLOCK];

bool before(uint64_t ka, uint ia, uint64_t kb, uint ib) { return ka < kb || (ka == kb && ia < ib); }

void global_stage(uint pair) {
    uint k = pc.k_lo, j = pc.j_hi;
    uint i = (pair / j) * 2u * j + pair % j, l = i + j;
    BufU64 keys = BufU64(pc.keys_addr);
    BufU32 index = BufU32(pc.index_addr);
    uint64_t ka = keys.v[i], kb = keys.v[l];
    uint ia = index.v[i], ib = index.v[l];
    bool ascending = (i & (pc.span - 1u) & k) == 0u;  // the position in its row decides
    if (before(kb, ib, ka, ia) == ascending) {
        keys.v[i] = kb;
        keys.v[l] = ka;
        index.v[i] = ib;
        index.v[l] = ia;
    }
}

void local_stages(uint block) {
    uint t = gl_LocalInvocationID.x, base = block * BLOCK;
    BufU64 keys = BufU64(pc.keys_addr);
    BufU32 index = BufU32(pc.index_addr);
    for (uint h = 0u; h < 2u; h++) {
        s_key[t + h * 256u] = keys.v[base + t + h * 256u];
        s_index[t + h * 256u] = index.v[base + t + h * 256u];
    }
    barrier();
    for (uint k = pc.k_lo; k <= pc.k_hi; k <<= 1) {
        for (uint j = min(k >> 1, pc.j_hi); j > 0u; j >>= 1) {
            uint i = (t / j) * 2u * j + t % j, l = i + j;
            bool ascending = ((base + i) & (pc.span - 1u) & k) == 0u;
            if (before(s_key[l], s_index[l], s_key[i], s_index[i]) == ascending) {
                uint64_t key = s_key[i];
                uint idx = s_index[i];
                s_key[i] = s_key[l];
                s_index[i] = s_index[l];
                s_key[l] = key;
                s_index[l] = idx;
            }
            barrier();
        }
    }
    for (uint h = 0u; h < 2u; h++) {
        keys.v[base + t + h * 256u] = s_key[t + h * 256u];
        index.v[base + t + h * 256u] = s_index[t + h * 256u];
    }
}

void main() {
    if (LOCAL == 1) {
        for (uint block = gl_WorkGroupID.x; block < pc.pairs / (BLOCK / 2u); block += gl_NumWorkGroups.x) {
            local_stages(block);
            barrier();
        }
        return;
    }
    for (uint pair = gl_GlobalInvocationID.x; pair < pc.pairs; pair += gl_NumWorkGroups.x * WG) global_stage(pair);
}

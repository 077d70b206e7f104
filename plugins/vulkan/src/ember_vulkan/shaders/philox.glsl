// Philox4x32-10, the cross-backend stream specified at the top of ember-cpu's csrc/random.c:
// block j of a draw at `offset` encrypts the 128-bit counter offset + j under key (k0, k1).
uvec4 philox_block(uint64_t offset, uint64_t j, uint k0, uint k1) {
    uint64_t at = offset + j;
    uvec4 c = uvec4(uint(at), uint(at >> 32), at < offset ? 1u : 0u, 0u);
    for (int round = 0; round < 10; round++) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

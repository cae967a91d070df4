/* Undefines dense_width.h's parameters and dense_tiles.h's macros (the end of a kernel
 * header that includes them; no include guard, on purpose). */
#undef K_CHUNK
#undef VEC_AT
#undef VEC_FMA
#undef TILE_COLS
#undef DENSE_VEC
#undef DENSE_VEC_UNALIGNED
#undef DENSE_LANE_INDEX
#undef DENSE_LANES
#undef DENSE_PORTABLE
#undef DENSE_MU_VECS
#undef DENSE_OUTS
#undef DENSE_CHUNK_VECS
#undef DENSE_NAME
#undef DENSE_ATTRIBUTES
#undef DENSE_INLINE
#undef DENSE_FMA_INTRINSIC
#undef DENSE_SET1_INTRINSIC

/* Instantiates gemm_tiled.cl as `gemm64`, 64x64 tiles (small grids). */
#define TILE 64
#define KNAME gemm64

/* Instantiates gemm_tiled.cl as `gemm`, 128x128 tiles. */
#define TILE 128
#define KNAME gemm

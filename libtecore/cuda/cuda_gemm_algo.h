/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm_algo.h -- one line naming a cuBLASLt algorithm: its id and
 * configuration (tile, stages, split-k and reduction, swizzle, custom
 * option, inner and cluster shape).  The cuda backend logs it when the
 * heuristic picks an algorithm for a new problem, and te-bench prints it
 * for its direct cuBLASLt call, so a record can show that libte and the
 * direct call run the same kernel (two equal lines) or not.
 *
 * Header-only because the two callers are different programs: libtecore
 * (which dlopens cuBLASLt and passes its own entry point) and te-bench.
 * The numbers are cuBLASLt's enum values (cublasLtMatmulTile_t,
 * cublasLtMatmulStages_t, ...), printed raw: equal lines mean equal
 * configurations. */
#ifndef TECORE_CUDA_GEMM_ALGO_H
#define TECORE_CUDA_GEMM_ALGO_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

typedef cublasStatus_t (*te_lt_algo_get_fn)(const cublasLtMatmulAlgo_t *,
                                            cublasLtMatmulAlgoConfigAttributes_t, void *, size_t,
                                            size_t *);

/* "algo 66 tile 40 stages 20 splitk 1 red 0 swizzle 0 custom 0 inner 0
 * cluster 0" into buf (n bytes); "algo ?" when get is NULL or fails. */
static inline void te_lt_algo_describe(te_lt_algo_get_fn get, const cublasLtMatmulAlgo_t *algo,
                                       char *buf, size_t n) {
  int32_t id = 0, splitk = 0;
  uint32_t tile = 0, stages = 0, red = 0, swz = 0, custom = 0;
  uint16_t inner = 0, cluster = 0;
  size_t w = 0;
  if (!n) return;
  if (!get || get(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w) != CUBLAS_STATUS_SUCCESS) {
    snprintf(buf, n, "algo ?");
    return;
  }
  /* attributes a cuBLASLt may lack stay 0 */
  get(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner, sizeof inner, &w);
  get(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
  snprintf(buf, n, "algo %d tile %u stages %u splitk %d red %u swizzle %u custom %u inner %u "
           "cluster %u", (int)id, (unsigned)tile, (unsigned)stages, (int)splitk, (unsigned)red,
           (unsigned)swz, (unsigned)custom, (unsigned)inner, (unsigned)cluster);
}

#endif
